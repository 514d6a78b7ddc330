"""Who is changing the configuration, and from where: one value per request, command or task.

The audit's receivers (audit.recording) read it when a configuration object is saved or
deleted. A request sets it in audit.middleware (admin, API, operator pages), manage.py for the
terminal's commands (CLI); anything else (a worker, beat, a thread a command started) is the
system. Contextvars follow a request into the threads Django and asgiref hand its work to.
"""

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.http import HttpRequest

SOURCE_ADMIN = "admin"
SOURCE_API = "api"
SOURCE_CONSOLE = "console"
SOURCE_CLI = "cli"
SOURCE_SYSTEM = "system"


@dataclass(frozen=True)
class Origin:
    source: str
    # The request whose user (and API token) made the change: read when a change is written,
    # since DRF authenticates a token only inside its view, after the middleware ran.
    request: HttpRequest | None = None
    # Who, when there is no user: the operating-system account at a terminal.
    label: str = ""


SYSTEM = Origin(SOURCE_SYSTEM)
_origin: ContextVar[Origin] = ContextVar("audit_origin", default=SYSTEM)


def origin_current() -> Origin:
    return _origin.get()


@contextmanager
def origin_set(origin: Origin) -> Iterator[Origin]:
    token = _origin.set(origin)
    try:
        yield origin
    finally:
        _origin.reset(token)


def cli_origin() -> Origin:
    try:
        account = getpass.getuser()
    except (KeyError, OSError):
        # A container's user may have no name in /etc/passwd.
        account = ""
    return Origin(SOURCE_CLI, label=account)
