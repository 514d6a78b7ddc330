"""The machine a benchmark runs on and where its CPU goes, read from /proc: figures measured on a
busy or different machine are not comparable, so the benchmark prints what it ran on, how loaded
the machine was, and the CPU each kind of process used while a figure was measured."""

import os
from pathlib import Path

from bench import harness


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def describe() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores"


def load_average() -> str:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return f"{one} {five} {fifteen} (1, 5, 15 min)"


def named_pids(*names: str) -> list[int]:
    """Pids of the processes whose command name is one of `names` (Redis has no other handle)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in names:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _pids_cpu(pids: list[int]) -> dict[int, float]:
    found = {}
    for pid in pids:
        try:
            found[pid] = harness.process_cpu_seconds(pid)
        except OSError:
            continue
    return found


class CpuMeter:
    """CPU seconds per process kind between `start` and each `read`.

    `trees` maps a kind to the pids whose whole process tree it owns (the web server's and the
    workers' children included); `listed` maps a kind to a function returning the pids it owns at
    that moment (PostgreSQL backends come and go). A listed process that exited before `read` is
    lost to the figure, so it reads low rather than high. `rest` is everything else the machine
    did meanwhile: what other programs cost while the figure was measured.
    """

    def __init__(self, *, trees: dict[str, list[int]], listed: dict[str, callable]):
        self.trees, self.listed = trees, listed

    def _trees(self) -> dict[str, float]:
        return {kind: sum(harness.tree_cpu_seconds(pid) for pid in pids) for kind, pids in self.trees.items()}

    def start(self) -> None:
        self.before_trees = self._trees()
        self.before_listed = {kind: _pids_cpu(list_pids()) for kind, list_pids in self.listed.items()}
        self.before_machine = harness.machine_cpu_seconds()

    def read(self) -> dict[str, float]:
        """What each kind used since `start`: readable more than once (one part of a figure, then
        the whole)."""
        used = {kind: after - self.before_trees[kind] for kind, after in self._trees().items()}
        for kind, list_pids in self.listed.items():
            before = self.before_listed[kind]
            used[kind] = sum(cpu - before.get(pid, 0.0) for pid, cpu in _pids_cpu(list_pids()).items())
        used["rest of the machine"] = max(0.0, harness.machine_cpu_seconds() - self.before_machine - sum(used.values()))
        return used
