"""The tiers hold: a unit test reaches nothing outside its process, and a test that uses the
suite's worker or web server is in the e2e tier whatever it is marked (tests/conftest.py)."""

import socket
import subprocess

import pytest

from tests.conftest import _worker_tests_first, pytest_collection_modifyitems
from tests.unit.conftest import UnitTierViolation, pytest_runtest_setup


class Item:
    """What the hooks read of a pytest item."""

    def __init__(self, *fixturenames: str, marks=()):
        self.fixturenames = list(fixturenames)
        self.marks = [mark.mark for mark in marks]

    def get_closest_marker(self, name):
        return next((mark for mark in self.marks if mark.name == name), None)

    def add_marker(self, mark):
        self.marks.append(mark.mark)


def test_a_unit_test_opens_no_socket():
    with pytest.raises(UnitTierViolation, match="socket connection"):
        socket.create_connection(("127.0.0.1", 6379), timeout=1)


def test_a_unit_test_starts_no_server():
    with socket.socket() as listening, pytest.raises(UnitTierViolation, match="listening socket"):
        listening.bind(("127.0.0.1", 0))


def test_a_unit_test_starts_no_process():
    with pytest.raises(UnitTierViolation, match="child process"):
        subprocess.run(["true"], check=True)


@pytest.mark.parametrize(
    "item, reason",
    [
        (Item("db"), "fixture db"),
        (Item("transactional_db", "worker"), "fixture transactional_db"),
        (Item(marks=[pytest.mark.django_db]), "the django_db mark"),
    ],
)
def test_a_unit_test_that_asks_for_the_database_is_refused_before_its_fixtures(item, reason):
    with pytest.raises(UnitTierViolation, match=reason):
        pytest_runtest_setup(item)


def test_a_test_with_the_suites_worker_or_web_server_is_e2e_whatever_it_is_marked():
    worker, web, browser, plain = (
        Item("worker", "transactional_db"),
        Item("api_server"),
        Item("worker", marks=[pytest.mark.browser]),
        Item("db", "fake_llm"),
    )
    pytest_collection_modifyitems(None, [worker, web, browser, plain])
    assert [sorted(mark.name for mark in item.marks) for item in (worker, web, browser, plain)] == [
        ["e2e"],
        ["e2e"],
        ["browser"],
        [],
    ]


def test_the_tests_that_use_the_worker_go_first_among_the_committing_tests_in_their_order():
    """Within a module too: each test without the worker between two with it would cost a start."""
    rolled_back = Item("db", marks=[pytest.mark.django_db])
    events = [Item("worker", "transactional_db"), Item("transactional_db"), Item("worker", "transactional_db")]
    browser = [Item("live_server"), Item("worker", "live_server")]
    no_database = Item("tmp_path")
    items = [rolled_back, *events, *browser, no_database]

    _worker_tests_first(items)

    assert items == [rolled_back, events[0], events[2], browser[1], events[1], browser[0], no_database]
