"""The agent-version snapshot: the typed structures describe exactly what is stored, equal
configurations pin the same version, and a stored snapshot is checked when it is read."""

import pytest

from agents.snapshot import (
    SnapshotInvalid,
    snapshot_hash,
    snapshot_parse,
)


def test_the_hash_does_not_depend_on_key_order():
    snapshot = {"agent": {"id": 1, "name": "a"}, "model": {"id": 2}, "fallback_model": None, "tools": []}
    reordered = {"tools": [], "fallback_model": None, "model": {"id": 2}, "agent": {"name": "a", "id": 1}}
    assert snapshot_hash(snapshot) == snapshot_hash(reordered)
    assert snapshot_hash(snapshot) != snapshot_hash({**snapshot, "tools": [{"name": "x"}]})


@pytest.mark.parametrize(
    "stored, problem",
    [
        ([], "an object"),
        ({"agent": {}, "model": {}, "tools": []}, "fallback_model"),
        ({"agent": {}, "model": None, "fallback_model": None, "tools": []}, "must be objects"),
        ({"agent": {}, "model": {}, "fallback_model": None, "tools": {}}, "must be a list"),
    ],
)
def test_a_malformed_snapshot_is_refused_when_read(stored, problem):
    with pytest.raises(SnapshotInvalid, match=problem):
        snapshot_parse(stored)
