"""Agent-version snapshots, read and parsed once per process.

A version never changes once written (a changed configuration is a new version, and ids are
never reused), so its parsed snapshot can be kept: a step reads the run's version id and takes
the snapshot from here instead of loading and parsing the JSON on every step. This is a cache
of immutable rows, not state a step leaves behind. Readers must not modify what they get.
"""

from functools import lru_cache

from agents.models import AgentVersion
from agents.snapshot import AgentSnapshot, snapshot_parse


@lru_cache(maxsize=256)
def version_snapshot(version_id: int) -> AgentSnapshot:
    return snapshot_parse(AgentVersion.objects.values_list("snapshot", flat=True).get(pk=version_id))


def run_snapshot(run) -> AgentSnapshot:
    """The snapshot a run's steps use: its version's, with the model a fork runs instead
    (Run.sandbox["model"], engine.forks) and no fallback, which the fork did not ask for, nor
    routing rules (engine.routing), which would pick another model than the one it asked for."""
    snapshot = version_snapshot(run.agent_version_id)
    model = (run.sandbox or {}).get("model")
    if model is None:
        return snapshot
    kept = {key: value for key, value in snapshot.items() if key != "routing"}
    return {**kept, "model": model, "fallback_model": None}
