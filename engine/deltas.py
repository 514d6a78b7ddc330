"""Relays streamed text to the run's events while the model is still answering.

Deltas are coalesced for a short window so a chatty stream (a few characters a chunk) costs
a handful of event rows per second instead of one per chunk.
"""

import time

from conversations import events
from conversations.events import EventType
from conversations.services import run_event_append
from platform_site.dbpool import release_connection

FLUSH_INTERVAL_SECONDS = 0.02


class DeltaRelay:
    def __init__(self, *, run_id, llm_call_id: int):
        self.run_id = run_id
        self.llm_call_id = llm_call_id
        self._buffer: list[str] = []
        self._last_flush = time.monotonic()

    def push(self, text: str) -> None:
        self._buffer.append(text)
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            text, self._buffer = "".join(self._buffer), []
            run_event_append(
                run_id=self.run_id,
                type=EventType.MESSAGE_DELTA,
                payload=events.message_delta(llm_call_id=self.llm_call_id, text=text),
            )
            # Back to waiting on the stream: do not hold a pooled connection meanwhile.
            release_connection()
        self._last_flush = time.monotonic()
