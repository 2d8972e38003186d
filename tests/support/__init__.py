"""Shared test support: the database server, tools, recording HTTP server."""
