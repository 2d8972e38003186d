"""Loops that apply the core's decisions: the worker and its wake-ups."""
