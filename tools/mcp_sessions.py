"""Connections to MCP servers, kept open per process.

Starting a stdio server costs a process start and a handshake (hundreds of milliseconds),
so a worker keeps one session per server and reuses it for every call. The MCP SDK is
async and the engine is not: each process runs one asyncio loop in a background thread,
and callers hand it coroutines with `asyncio.run_coroutine_threadsafe`. A session is held
open by its own task (the SDK's context managers must be entered and left in one task);
a session whose server died, or whose settings changed, is replaced on the next call.
"""

import asyncio
import logging
import os
import sys
import tempfile
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass

from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Tool

from platform_site import outbound
from tools.models import MCPServer, secret_mapping

log = logging.getLogger(__name__)

# Bounds a listing: a server whose pagination never ends cannot hang a discovery.
MAX_LIST_PAGES = 50
# How much of a failed stdio server's stderr a discovery error quotes.
STDERR_TAIL_CHARS = 2000


class MCPUnavailable(Exception):
    """The server could not be reached, or the connection broke."""


@dataclass(frozen=True)
class ServerConfig:
    """Everything needed to connect, read from the live row; equal configs share a session."""

    id: int
    name: str
    transport: str
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    url: str
    headers: tuple[tuple[str, str], ...]
    connect_timeout_seconds: float

    @classmethod
    def from_server(cls, server: MCPServer) -> "ServerConfig":
        return cls(
            id=server.pk,
            name=server.name,
            transport=server.transport,
            command=server.command,
            args=tuple(server.args or ()),
            env=tuple(sorted(secret_mapping(server.env).items())),
            url=server.url,
            headers=tuple(sorted(secret_mapping(server.headers).items())),
            connect_timeout_seconds=server.connect_timeout_seconds,
        )


@asynccontextmanager
async def _http_transport(config: ServerConfig):
    async with outbound.mcp_http_client(
        headers=dict(config.headers), timeout_seconds=config.connect_timeout_seconds
    ) as http_client:
        async with streamable_http_client(config.url, http_client=http_client) as streams:
            yield streams


def _client(config: ServerConfig, errlog=None) -> Client:
    if config.transport == MCPServer.Transport.STDIO:
        params = StdioServerParameters(command=config.command, args=list(config.args), env=dict(config.env))
        # By default the server's stderr goes to the process's real stderr: Celery replaces
        # sys.stderr with a logging proxy that has no file descriptor for a child process to inherit.
        transport = stdio_client(params, errlog=errlog or sys.__stderr__)
    else:
        transport = _http_transport(config)
    return Client(transport, read_timeout_seconds=config.connect_timeout_seconds, cache=None)


class _Session:
    def __init__(self, config: ServerConfig):
        self.config = config
        self.client: Client | None = None
        self.error: BaseException | None = None
        self.ready = asyncio.Event()
        self.closing = asyncio.Event()
        self.task = asyncio.create_task(self._hold(), name=f"mcp:{config.name}")

    async def _hold(self) -> None:
        try:
            async with _client(self.config) as client:
                self.client = client
                self.ready.set()
                await self.closing.wait()
        except Exception as exc:  # the reason a connection failed or ended, for the next caller
            self.error = exc
            log.warning("MCP server %s: session ended: %r", self.config.name, exc)
        finally:
            self.client = None
            self.ready.set()

    @property
    def usable(self) -> bool:
        return self.client is not None and not self.task.done() and not self.closing.is_set()

    def close(self) -> None:
        self.closing.set()


def _reason(exc: BaseException | None) -> str:
    """The most telling message inside an exception: task groups wrap the real ones."""
    if exc is None:
        return "no reason given"
    leaves, pending = [], [exc]
    while pending:
        current = pending.pop(0)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        else:
            leaves.append(current)
    blocked = [leaf for leaf in leaves if isinstance(leaf, outbound.OutboundBlocked)]
    if blocked:
        return blocked[0].message
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves[:3])


def _stderr_tail(errlog) -> str:
    """The end of what a stdio server wrote to stderr: why it exited, more often than not."""
    errlog.flush()
    size = errlog.seek(0, os.SEEK_END)
    errlog.seek(max(0, size - STDERR_TAIL_CHARS * 4))
    return errlog.read().decode("utf-8", "replace").strip()[-STDERR_TAIL_CHARS:]


def _session_expired(exc: BaseException) -> bool:
    """A streamable-HTTP server forgot the session (idle timeout, restart) and ran nothing."""
    return isinstance(exc, MCPError) and exc.message == "Session terminated"


def _connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, MCPError):
        return exc.message == "Connection closed" or _session_expired(exc)
    return isinstance(exc, (OSError, EOFError)) or type(exc).__module__.startswith(("anyio", "httpx2", "httpcore2"))


class SessionPool:
    def __init__(self):
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid: int | None = None
        self._sessions: dict[int, _Session] = {}

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        # A forked child inherits the object but not the thread: it starts its own loop.
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    loop = asyncio.new_event_loop()
                    threading.Thread(target=loop.run_forever, name="mcp-sessions", daemon=True).start()
                    self._loop, self._sessions, self._pid = loop, {}, os.getpid()
        return self._loop

    def _submit(self, coroutine, timeout: float):
        future = asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    async def _session(self, config: ServerConfig) -> _Session:
        session = self._sessions.get(config.id)
        dead = session is not None and session.ready.is_set() and not session.usable
        if session is not None and (dead or session.config != config):
            session.close()
            session = None
        if session is None:
            session = self._sessions[config.id] = _Session(config)
        try:
            await asyncio.wait_for(session.ready.wait(), config.connect_timeout_seconds)
        except TimeoutError:
            session.task.cancel()
            self._sessions.pop(config.id, None)
            raise MCPUnavailable(f"MCP server {config.name} did not answer within {config.connect_timeout_seconds} s.")
        if session.client is None:
            self._sessions.pop(config.id, None)
            raise MCPUnavailable(f"MCP server {config.name} could not be started or reached: {_reason(session.error)}")
        return session

    async def _call(
        self, config: ServerConfig, name: str, arguments: dict, timeout: float, rerunnable: bool
    ) -> CallToolResult:
        for attempt in (1, 2):
            session = await self._session(config)
            try:
                return await asyncio.wait_for(
                    session.client.call_tool(name, arguments, read_timeout_seconds=timeout), timeout
                )
            except Exception as exc:
                if not _connection_lost(exc):
                    raise
                # A server that died since the last call shows up only now. The next session
                # is a new process or connection; the call is sent again only when running it
                # twice is harmless, otherwise its unknown outcome is reported.
                session.close()
                self._sessions.pop(config.id, None)
                if attempt == 2 or not (rerunnable or _session_expired(exc)):
                    raise MCPUnavailable(
                        f"the connection to MCP server {config.name} broke during the call ({exc}); "
                        "its outcome is unknown"
                    ) from exc
                log.warning("MCP server %s: connection lost (%r); reconnecting", config.name, exc)

    def call_tool(
        self, config: ServerConfig, name: str, arguments: dict, *, timeout: float, rerunnable: bool
    ) -> CallToolResult:
        return self._submit(
            self._call(config, name, arguments, timeout, rerunnable), 2 * (timeout + config.connect_timeout_seconds) + 5
        )

    async def _list_tools(self, config: ServerConfig) -> list[Tool]:
        # Discovery runs in the admin's process and reflects the settings just saved, so it
        # uses a connection of its own instead of a pooled one. A stdio server's stderr is kept,
        # so that an operator sees why a server that exited failed, not just "Connection closed".
        with tempfile.TemporaryFile() as errlog:
            try:
                return await self._list_pages(config, errlog)
            except MCPUnavailable as exc:
                stderr = _stderr_tail(errlog) if config.transport == MCPServer.Transport.STDIO else ""
                if not stderr:
                    raise
                raise MCPUnavailable(f"{str(exc).rstrip('.')}. Its stderr ended with: {stderr}") from exc.__cause__

    async def _list_pages(self, config: ServerConfig, errlog) -> list[Tool]:
        tools, cursor = [], None
        try:
            async with asyncio.timeout(config.connect_timeout_seconds * 2):
                async with _client(config, errlog) as client:
                    for _ in range(MAX_LIST_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
        except TimeoutError:
            raise MCPUnavailable(
                f"MCP server {config.name} did not list its tools within {config.connect_timeout_seconds * 2} s."
            )
        except MCPError as exc:
            raise MCPUnavailable(f"MCP server {config.name} refused to list its tools: {exc}") from exc
        except Exception as exc:
            raise MCPUnavailable(f"MCP server {config.name} could not be started or reached: {_reason(exc)}") from exc
        return tools

    def list_tools(self, config: ServerConfig) -> list[Tool]:
        return self._submit(self._list_tools(config), config.connect_timeout_seconds * 2 + 5)


pool = SessionPool()
