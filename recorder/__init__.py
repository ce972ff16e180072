"""iotape recorder."""
