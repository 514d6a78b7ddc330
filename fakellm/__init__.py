"""A scriptable fake LLM server speaking the OpenAI and Anthropic wire formats.

Tests, the demo and benchmarks point real provider code at it so that agent
behaviour can be exercised deterministically and without network access.
Entry points: ``fakellm.app.create_app`` and ``fakellm.testing.serve_in_thread``.
"""
