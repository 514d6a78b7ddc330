"""Fixtures of the fork tests: the counting service (the outside witness of every write) and
agents whose write tool books through it."""

import uuid
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model

from bench import counting_service
from bench.chaos_setup import WRITE_TOOL, count_write_tool
from fakellm.testing import serve_app_in_thread
from tests.support.factories import make_agent
from tests.support.llm import fake_model


@dataclass
class Counting:
    url: str
    tally: counting_service.Tally

    def keys(self) -> int:
        """Effective writes: one per idempotency key."""
        return self.tally.summary()["keys"]

    def per_key(self) -> dict:
        return self.tally.summary()["per_key"]


@pytest.fixture
def counting():
    tally = counting_service.Tally()
    url, stop = serve_app_in_thread(counting_service.create_app(tally))
    try:
        yield Counting(url=url, tally=tally)
    finally:
        stop()


@pytest.fixture
def boss(db):
    return get_user_model().objects.create_superuser(f"boss-{uuid.uuid4().hex[:6]}", password="x")


def booking_script(*, answer: str = "Booked order {n}: {tool@chaos-count-write:recorded}") -> dict:
    """Book the order, then (unless the booking says sold out) echo it, then answer."""
    return {
        "scenarios": [
            {
                "match": r"order (?P<n>\d+)",
                "needs_description": {WRITE_TOOL: ["order"]},
                "not_understood": {"content": "I do not know how to book."},
                "steps": [
                    {"tool_calls": [{"name": WRITE_TOOL, "arguments": {"order": "{n}"}}]},
                    {
                        "branches": [
                            {
                                "if_last_tool_result_matches": "sold out",
                                "then": {"content": "Could not book order {n}: sold out."},
                            }
                        ],
                        "else": {"tool_calls": [{"name": "test-echo", "arguments": {"text": "order {n}"}}]},
                    },
                    {"content": answer},
                ],
            }
        ]
    }


def booking_agent(fake_llm, counting: Counting, *, approval: str = "never", script: dict | None = None, **fields):
    """An agent that books through the counting service (its write's approval: never or always)."""
    count_write_tool(counting.url)
    model = fake_model(fake_llm, script or booking_script())
    return make_agent(tools=[WRITE_TOOL, "test-echo"], approval={WRITE_TOOL: approval}, model_config=model, **fields)
