"""Plain code carried by an event loop (platform_site.green, engine.reactor): many carried calls
share one thread and wait at once, an error raised by an awaitable is raised where the plain
code waited, and blocking calls go to threads. The database from carried code, and HTTP errors,
are in tests/platform/test_green.py."""

import asyncio
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from greenlet import getcurrent
from psycopg import errors

from engine.reactor import Reactor
from platform_site import green, green_db
from tests.support.carried import carry


def _wants(wanted, states: list):
    """A psycopg-style wait generator: asks for `wanted` once, records what it got."""
    states.append((yield wanted))


def test_carried_calls_share_one_thread_and_wait_at_once():
    log, threads = [], set()

    def plain(n):
        threads.add(threading.get_ident())
        log.append(("start", n))
        green.sleep(0.05)
        log.append(("end", n))
        return n * n

    async def main():
        return await asyncio.gather(*(green.spawn(plain, n) for n in range(50)))

    assert asyncio.run(main()) == [n * n for n in range(50)]
    assert len(threads) == 1
    # Every call started before any ended: they waited together, not one after another.
    assert [kind for kind, _ in log[:50]] == ["start"] * 50


def test_an_error_raised_by_an_awaitable_is_raised_where_the_plain_code_waited():
    def plain():
        try:
            green.await_(asyncio.wait_for(asyncio.sleep(5), 0.01))
        except TimeoutError:
            return "caught here"

    assert carry(plain) == "caught here"


def test_an_error_the_plain_code_does_not_catch_reaches_the_caller():
    def plain():
        green.await_(asyncio.sleep(0))
        raise ValueError("from the plain code")

    with pytest.raises(ValueError, match="from the plain code"):
        carry(plain)


def test_await_outside_carried_code_is_refused_and_the_helpers_block_instead():
    waiting = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="carried"):
        green.await_(waiting)
    waiting.close()
    assert not green.carried()
    assert green.offload(threading.get_ident) == threading.get_ident()  # here, not in a thread
    green.sleep(0)


def test_offloaded_calls_run_in_another_thread_and_return_their_value():
    def plain():
        return threading.get_ident(), green.offload(threading.get_ident)

    loop_thread, offload_thread = carry(plain)
    assert loop_thread != offload_thread


def test_a_carried_wait_for_pool_work_lets_the_loop_carry_the_rest_and_reads_as_future_result():
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-pool")
    release, log = threading.Event(), []

    def slow():
        release.wait(5)
        return threading.get_ident()

    def failing():
        raise ValueError("from the pool")

    def waiting():
        log.append("waiting")
        worked_on = green.wait(pool.submit(slow), timeout=5)
        log.append("woken")
        with pytest.raises(ValueError, match="from the pool"):
            green.wait(pool.submit(failing))
        return threading.get_ident(), worked_on

    def other():
        # Runs while the first waits: the loop's thread is not held by the wait.
        green.sleep(0.05)
        log.append("other ran")
        release.set()

    async def main():
        return await asyncio.gather(green.spawn(waiting), green.spawn(other))

    try:
        (loop_thread, worked_on), _ = asyncio.run(main())
        assert log == ["waiting", "other ran", "woken"]
        assert worked_on != loop_thread

        # A timeout is TimeoutError where the plain code waited, and the work is left to finish.
        late = threading.Event()
        stuck = pool.submit(late.wait, 5)

        def timed_out():
            with pytest.raises(TimeoutError):
                green.wait(stuck, timeout=0.05)
            return "timed out"

        assert carry(timed_out) == "timed out"
        assert not stuck.cancelled()
        late.set()
        assert stuck.result(timeout=5) is True
        # Outside carried code the same call is Future.result.
        assert green.wait(pool.submit(lambda: "plain")) == "plain"
    finally:
        release.set()
        pool.shutdown(wait=True)


def test_the_reactor_carries_work_on_its_own_loop_thread_only_when_enabled():
    reactor = Reactor()
    try:
        assert reactor.carry(threading.current_thread) is threading.current_thread()  # not enabled: here
        reactor.enabled = True
        carried_in = reactor.carry(lambda: (threading.current_thread().name, green.carried()))
        assert carried_in == ("engine-loop", True)
        with pytest.raises(KeyError):
            reactor.carry(lambda: {}["missing"])
    finally:
        reactor.stop()


@pytest.mark.parametrize("wanted", [green_db.WAIT_R, green_db.WAIT_W])
def test_a_carried_wait_leaves_no_reader_or_writer_on_the_loop_whether_it_ends_ready_or_timed_out(wanted):
    left, right = socket.socketpair()
    states = []
    try:
        if wanted == green_db.WAIT_R:
            right.send(b"x")  # readable at once

        def ready_then_timed_out():
            loop = getcurrent().loop  # the carried greenlet's loop
            green_db.carried_wait(_wants(wanted, states), left.fileno())
            registered_after_ready = (loop.remove_reader(left.fileno()), loop.remove_writer(left.fileno()))
            if wanted == green_db.WAIT_R:
                left.recv(1)  # nothing more to read: the next wait can only time out
                with pytest.raises(errors._WaitTimeout):
                    green_db.carried_wait(_wants(wanted, states), left.fileno(), timeout=0.05)
            registered_after_timeout = (loop.remove_reader(left.fileno()), loop.remove_writer(left.fileno()))
            return registered_after_ready, registered_after_timeout

        after_ready, after_timeout = carry(ready_then_timed_out)
    finally:
        left.close()
        right.close()
    assert states[0] == (green_db.READY_R if wanted == green_db.WAIT_R else green_db.READY_W)
    assert after_ready == (False, False) and after_timeout == (False, False)
