"""The HTTP service: the FastAPI app, its dependencies and settings, routes, dashboard."""
