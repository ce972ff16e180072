"""iotape replayer."""
