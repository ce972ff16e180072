"""iotape analyzer."""
