"""`iotape lab`: experiments on emulated devices, end to end (devices made and
released, runs recorded and ingested, predictions made before the measurement and
set beside it). `iotape lab hybrid` reproduces the hybrid-array experiment
(docs/hybrid.md)."""
