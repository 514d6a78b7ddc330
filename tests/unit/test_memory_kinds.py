"""The agents app names the memory kinds an agent may keep (the memory app sits above it): the
same kinds, in the same order, as the memory app's."""

from agents.models import MEMORY_KINDS, memory_kinds_problem
from memory.models import MemoryKind


def test_the_agents_app_names_the_memory_app_s_kinds():
    assert list(MEMORY_KINDS) == list(MemoryKind.values)
    assert [str(label) for label in MEMORY_KINDS.values()] == [str(label) for label in MemoryKind.labels]


def test_memory_kinds_are_a_list_of_known_kinds_each_once():
    assert memory_kinds_problem([]) is None
    assert memory_kinds_problem(["fact", "preference"]) is None
    assert "opinion" in memory_kinds_problem(["fact", "opinion"])
    assert memory_kinds_problem(["fact", "fact"])
    assert memory_kinds_problem("fact")
    assert memory_kinds_problem([1])
