"""platform_site/thread_stream.py: a sync generator served as an async stream, stopped when the
reader goes away, its failure raised to the reader."""

import itertools
import threading
import time

import pytest
from asgiref.sync import async_to_sync

from platform_site.thread_stream import QUEUE_CHUNKS, thread_stream


def _producers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "thread-stream"]


def _wait_gone(seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while _producers() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _producers()


@async_to_sync
async def _read(make, limit: int | None = None) -> list:
    stream = thread_stream(make)
    chunks = []
    try:
        async for chunk in stream:
            chunks.append(chunk)
            if limit is not None and len(chunks) == limit:
                break
    finally:
        await stream.aclose()
    return chunks


def test_every_chunk_arrives_in_order_and_the_thread_ends():
    assert _read(lambda: (f"{n}\n" for n in range(100))) == [f"{n}\n" for n in range(100)]
    assert _wait_gone()


def test_a_reader_that_stops_stops_an_endless_producer_which_never_runs_far_ahead():
    made = itertools.count()

    assert _read(lambda: (n for n in made), limit=3) == [0, 1, 2]
    assert _wait_gone()
    # What was produced beyond what was read is bounded by the queue, not by the generator.
    assert next(made) <= 3 + QUEUE_CHUNKS + 2


def test_a_failure_of_the_producer_is_raised_to_the_reader():
    def failing():
        yield "first"
        raise ValueError("the database went away")

    with pytest.raises(ValueError, match="the database went away"):
        _read(failing)
    assert _wait_gone()
