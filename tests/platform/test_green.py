"""Plain code carried by an event loop (platform_site.green, engine.reactor): many carried calls
share one thread and wait at once, an error raised by an awaitable is raised where the plain
code waited, the database works from carried code, blocking calls go to threads, and HTTP
errors read the same as on the plain path."""

import asyncio
import socket
import threading
import uuid

import pytest

from agents.models import Agent
from agents.providers import ProviderError, get_provider
from platform_site import green, green_db
from tests.agents.test_providers import model_dict
from tests.support.carried import carry


@pytest.mark.django_db(transaction=True)
def test_the_database_works_from_carried_code():
    slug = f"green-{uuid.uuid4().hex[:8]}"

    def plain():
        # Django refuses database calls where it sees a running event loop: carried code must
        # not look like that, and it sees what other connections committed.
        green.sleep(0)
        return Agent.objects.filter(slug=slug).exists()

    assert carry(plain) is False


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _send(model: dict):
    provider = get_provider("openai_compatible")
    body = provider.build_request(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        tools=[],
        tool_choice="auto",
        parallel_tool_calls=True,
    )
    try:
        provider.send(model=model, api_key="", body=body)
    except ProviderError as error:
        return error.message, error.retryable
    raise AssertionError("the call was expected to fail")


def test_a_refused_connection_reads_the_same_carried_and_plain():
    model = model_dict("m", f"http://127.0.0.1:{_closed_port()}/v1", "openai_compatible", False)
    plain, carried = _send(model), carry(_send, model)
    assert plain == carried
    assert "connection refused" in carried[0] and carried[1] is True


def test_a_read_timeout_reads_the_same_carried_and_plain(fake_llm):
    with fake_llm.held() as held:  # never answered while the calls wait
        name = fake_llm.script(f"slow-{uuid.uuid4().hex[:8]}", {"fallback": {"content": "late", "hold": held.label}})
        model = model_dict(name, fake_llm.api_base, "openai_compatible", False, read_timeout_seconds=0.2)
        plain, carried = _send(model), carry(_send, model)
    assert plain == carried
    assert "timed out after 0.2 s without an answer" in carried[0]


@pytest.mark.django_db(transaction=True)
def test_carried_statements_wait_together_and_queue_for_pool_slots_without_blocking_the_loop():
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the cooperative waits are PostgreSQL's")
    green_db.install()
    pool_size = connection.settings_dict["OPTIONS"]["pool"]["max_size"]
    log = []

    def plain(n):
        from django.db import connection as mine

        log.append(("start", n))
        with mine.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(0.2), %s", [n])
            value = cursor.fetchone()[1]
        log.append(("end", n))
        return value

    async def main():
        return await asyncio.gather(*(green.spawn(plain, n) for n in range(3 * pool_size)))

    # Three times as many runs as the pool has connections: the ones without a slot wait for
    # one on the loop (a thread blocked in the pool would stop the runs about to give one back).
    assert asyncio.run(main()) == list(range(3 * pool_size))
    # Every one started before the first statement returned: they waited on PostgreSQL together.
    assert [kind for kind, _ in log[: 3 * pool_size]] == ["start"] * (3 * pool_size)


_CUT_BODY = b'{"id": "cut", "choices": [{"message": {"role": "assistant", "content": "' + b"x" * 60


class _CutServer:
    """Answers every request with a 200 promising 5000 bytes, sends the start of one and closes the connection."""

    def __init__(self):
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n")
                conn.sendall(_CUT_BODY)

    def close(self):
        self._socket.close()


def test_an_unstreamed_answer_cut_mid_body_reads_the_same_carried_and_plain():
    """The whole body is read in one wait (platform_site.outbound.send_whole): a connection lost
    within it still says how much of the answer had arrived, on both paths."""
    server = _CutServer()
    try:
        model = model_dict("m", f"http://127.0.0.1:{server.port}/v1", "openai_compatible", False)
        plain, carried = _send(model), carry(_send, model)
    finally:
        server.close()
    # The words after the count are each HTTP client's own.
    for message, retryable in (plain, carried):
        assert f"was cut after {len(_CUT_BODY)} bytes" in message and retryable is True
