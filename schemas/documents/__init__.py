"""The JSON documents that cross a component boundary, one typed definition each
(pydantic models): plan.json, the replay summary, the workload report, the lab
report. Writers build the model; readers call the module's `load(path)`."""
