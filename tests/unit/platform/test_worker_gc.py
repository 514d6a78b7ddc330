"""A worker process collects its young garbage every 10,000 objects, not CPython's 700: the runs
it carries survive their young collections, and each full collection walks them all."""

import gc

import pytest

from platform_site.celery import GC_YOUNG_THRESHOLD, _collect_less_often


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_a_starting_worker_raises_only_the_young_threshold(thresholds):
    gc.set_threshold(700, 10, 10)
    _collect_less_often()
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
