"""The agent loop: a model plans and acts through tools, one durable step at a time."""
