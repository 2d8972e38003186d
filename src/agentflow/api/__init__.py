"""The HTTP API (FastAPI): thin routers between HTTP and the engine."""
