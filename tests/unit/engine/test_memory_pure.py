"""The pure parts of long-term memory in a run: reading an extraction's answer strictly, the
message that shows memories, whose memories a run reads, and an eval case's memory checks."""

from types import SimpleNamespace

import pytest

from engine.memory import (
    MEMORY_EXTRACTION_PROMPT,
    MEMORY_HEADING,
    ExtractionMalformed,
    MemoryTarget,
    extraction_parse,
    memory_message,
    memory_target,
)
from evals.scoring import Observation, score_run

SNAPSHOT = {"agent": {"id": 7}, "memory": {"space": "", "kinds": ["fact"], "shown": 5, "ttl_days": None}}


def test_an_extraction_answer_is_read_strictly():
    assert extraction_parse('{"changes": []}') == []
    fenced = '```json\n{"changes": [{"action": "delete", "id": "a"}, {"action": "keep", "id": "b"}]}\n```'
    assert [(p.action, p.memory_id) for p in extraction_parse(fenced)] == [("delete", "a"), ("keep", "b")]
    [update] = extraction_parse('{"changes": [{"action": "update", "id": "a", "statement": "住在重庆"}]}')
    assert (update.action, update.memory_id, update.kind, update.statement) == ("update", "a", "", "住在重庆")
    for bad in (
        None,
        "",
        "[]",
        "住在成都",
        '{"changes": {}}',
        '{"changes": [], "note": "x"}',
        '{"changes": ["住在成都"]}',
        '{"changes": [{"action": "keep"}]}',
        '{"changes": [{"action": "add", "kind": "fact", "statement": "x", "id": "a"}]}',
        '{"changes": [{"action": "delete", "id": 3}]}',
        'Sure! {"changes": []}',
        '{"changes": [{"action": ["add"]}]}',
        '{"changes": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"changes": [{"action": "add", "kind": "fact", "statement": "\\ud800"}]}',
    ):
        with pytest.raises(ExtractionMalformed):
            extraction_parse(bad)


def test_the_prompt_and_the_memory_message_keep_the_contract():
    assert MEMORY_EXTRACTION_PROMPT.splitlines()[0] == "[memory-extraction]"
    memories = [SimpleNamespace(statement="住在成都"), SimpleNamespace(statement="喜欢猫")]
    assert memory_message(memories) == {"role": "system", "content": f"{MEMORY_HEADING}\n- 住在成都\n- 喜欢猫"}
    assert memory_message([]) is None


def test_whose_memories_a_run_reads():
    assert memory_target(snapshot=SNAPSHOT, sandbox=None, end_user="u1", owner_id=3) == MemoryTarget(
        "agent:7", 3, "u1"
    )
    shared = {**SNAPSHOT, "memory": {**SNAPSHOT["memory"], "space": "support"}}
    assert memory_target(snapshot=shared, sandbox=None, end_user="u1", owner_id=3).scope == "support"
    # An evaluation's run: its eval run's scope, never the agent's; without one, no memory.
    evaluated = {"results": {}, "memory_scope": "eval:9"}
    assert memory_target(snapshot=SNAPSHOT, sandbox=evaluated, end_user="e", owner_id=None).scope == "eval:9"
    assert memory_target(snapshot=SNAPSHOT, sandbox={"results": {}}, end_user="e", owner_id=None) is None
    assert memory_target(snapshot=SNAPSHOT, sandbox=None, end_user="", owner_id=3) is None
    assert memory_target(snapshot={"agent": {"id": 7}}, sandbox=None, end_user="u1", owner_id=3) is None


def test_an_eval_case_checks_what_was_recalled_and_what_was_forgotten():
    observed = Observation(stop_reason="final_answer", answer="重庆明天晴。", memories_shown=["住在重庆"])
    checks = score_run({"remembered": ["重庆"], "forgotten": ["成都"]}, observed)
    assert [(c["kind"], c["passed"]) for c in checks] == [("finished", True), ("remembered", True), ("forgotten", True)]
    stale = Observation(stop_reason="final_answer", answer="成都明天晴。", memories_shown=["住在成都"])
    checks = score_run({"remembered": ["重庆"], "forgotten": ["成都"]}, stale)
    assert [(c["kind"], c["passed"], c["reason"]) for c in checks[1:]] == [
        ("remembered", False, "'重庆' was not in a memory shown"),
        ("forgotten", False, "'成都' was in a memory shown and in the answer"),
    ]
