"""Structured logs: every line carries the ids of the run, model call and tool call it is about.

The ids live in context variables, bound by the engine around each step and by the web
middleware around each request, and a logging filter copies them onto every record. With
`LOG_FORMAT=json` each record is one JSON object (python-json-logger), so one run can be
followed through the web's and the workers' logs by filtering on `run_id`.
"""

import contextvars
import logging
import uuid
from contextlib import contextmanager

from platform_site.around_middleware import AroundMiddleware

CONTEXT_FIELDS = ("request_id", "run_id", "llm_call_id", "tool_invocation_id")

# The default is never mutated: every bind sets a new dict.
_context: contextvars.ContextVar[dict] = contextvars.ContextVar("agentry_log_context", default={})  # noqa: B039


@contextmanager
def log_context(**fields):
    """Bind ids for the code inside the block (and what it calls, in the same thread or task)."""
    token = _context.set({**_context.get(), **{k: str(v) for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def bind(**fields) -> None:
    """Bind ids until the surrounding log_context ends (for ids learnt half-way, e.g. a new run)."""
    _context.set({**_context.get(), **{k: str(v) for k, v in fields.items() if v is not None}})


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class HumanFormatter(logging.Formatter):
    """The readable format for a terminal, with the bound ids appended in brackets."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = " ".join(f"{key}={getattr(record, key)}" for key in CONTEXT_FIELDS if hasattr(record, key))
        return f"{line} [{ids}]" if ids else line


def _request_id(request) -> str:
    return request.headers.get("X-Request-ID", "")[:64] or uuid.uuid4().hex[:16]


class RequestLogContextMiddleware(AroundMiddleware):
    """Binds a request id (the caller's X-Request-ID, or a new one) and, for URLs naming a run,
    its id; the id is echoed back so a client can quote it."""

    def around(self, request):
        request.agentry_request_id = _request_id(request)
        return log_context(request_id=request.agentry_request_id)

    def finish(self, request, response):
        response.setdefault("X-Request-ID", request.agentry_request_id)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        if "run_id" in view_kwargs:
            bind(run_id=view_kwargs["run_id"])
