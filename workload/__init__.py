"""iotape workload."""
