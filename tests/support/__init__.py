"""What the tests share, one module per kind (docs/testing.md, "Where the helpers live"):

- factories: the common rows (users and API tokens, model configs, agents); api: API clients
- llm: model configs on the fake model server, checks of a run's model calls
- runs: runs driven through the engine in-process; carried: code run as the worker carries it
- ledger, ledger_seed: ledger rows written without the engine (one run, many runs)
- waits: waiting on a condition; admin_forms: the admin's management-form fields
- servers: the petstore API and MCP server tools call, in threads; api_server: the ASGI app under
  uvicorn and a webhook receiver; workers: the Celery worker process; browser: Chromium
- tool_fixtures: the test-only tools (AGENTRY_TOOL_MODULES); pgbouncer: PgBouncer before PostgreSQL
- flush, passwords, run_lock: the suite's own machinery, installed by tests/conftest.py
"""
