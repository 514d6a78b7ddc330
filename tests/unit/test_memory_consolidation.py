"""What a list of proposed memory changes comes to against the memories held (memory.consolidation):
the same fact never twice, a changed fact replacing the old one, malformed lists refused whole,
secrets and blocked personal data never stored, redacted personal data stored redacted."""

import uuid

import pytest

from memory.consolidation import (
    Held,
    MemoryProposal,
    MemoryRejected,
    consolidation_plan,
    secret_found,
    statement_clean,
    statement_key,
)

CHENGDU = Held(id=str(uuid.uuid4()), kind="fact", statement="住在成都")
TEA = Held(id=str(uuid.uuid4()), kind="preference", statement="Likes green tea.")
ALL = ["fact", "preference", "event", "instruction"]


def plan(*proposals, held=(CHENGDU, TEA), kinds=ALL, rules=None):
    return consolidation_plan(list(proposals), held=list(held), kinds=kinds, rules=rules)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("住在成都", "住在成都。"),
        ("住在 成都", "住在成都"),
        ("喜欢咖啡，不加糖", "喜欢咖啡,不加糖"),
        ("Likes green tea.", "likes   GREEN tea"),
        ("Ｌｉｋｅｓ tea！", "likes tea"),
        ("生日是“5月1日”", '生日是"5月1日"'),
    ],
)
def test_statements_that_differ_only_in_form_have_one_key(a, b):
    assert statement_key(a) == statement_key(b)


@pytest.mark.parametrize(
    ("a", "b"), [("住在成都", "住在重庆"), ("version 3.5", "version 35"), ("likes tea", "likes teas")]
)
def test_statements_that_say_different_things_have_different_keys(a, b):
    assert statement_key(a) != statement_key(b)


def test_a_statement_is_stored_trimmed_with_single_spaces():
    assert statement_clean("  lives in\n Chengdu\t ") == "lives in Chengdu"


def test_a_new_fact_is_added():
    result = plan(MemoryProposal("add", "fact", "有一只猫"))
    assert result.adds == [("fact", "有一只猫")] and not (result.updates or result.deletes or result.keeps)


def test_adding_a_held_fact_again_keeps_the_held_one_instead():
    result = plan(MemoryProposal("add", "fact", "住在成都。"), MemoryProposal("add", "fact", "有一只猫"))
    assert result.adds == [("fact", "有一只猫")]
    assert result.keeps == [CHENGDU.id]


def test_the_same_new_fact_twice_in_one_list_is_added_once():
    result = plan(MemoryProposal("add", "fact", "有一只猫"), MemoryProposal("add", "fact", "有一只猫。"))
    assert result.adds == [("fact", "有一只猫")]


def test_a_changed_fact_replaces_the_old_statement():
    result = plan(MemoryProposal("update", "fact", "住在重庆", memory_id=CHENGDU.id))
    assert result.updates == [(CHENGDU.id, "fact", "住在重庆")] and not result.adds


def test_an_update_without_a_kind_keeps_the_memory_s_kind():
    result = plan(MemoryProposal("update", statement="Likes black tea", memory_id=TEA.id))
    assert result.updates == [(TEA.id, "preference", "Likes black tea")]


def test_an_update_to_what_the_memory_already_says_keeps_it():
    result = plan(MemoryProposal("update", "fact", "住在成都。", memory_id=CHENGDU.id))
    assert result.keeps == [CHENGDU.id] and not result.updates


def test_an_update_to_what_another_memory_says_deletes_the_updated_one():
    result = plan(MemoryProposal("update", "preference", "likes green tea", memory_id=CHENGDU.id))
    assert result.deletes == [(CHENGDU.id, f"same as {TEA.id}")]
    assert result.keeps == [TEA.id] and not result.updates


def test_an_update_to_a_fact_added_earlier_in_the_list_deletes_the_updated_one():
    result = plan(
        MemoryProposal("add", "fact", "住在重庆"), MemoryProposal("update", "fact", "住在重庆", memory_id=CHENGDU.id)
    )
    assert result.adds == [("fact", "住在重庆")] and result.deletes == [(CHENGDU.id, "same as new:0")]


def test_delete_and_keep():
    result = plan(MemoryProposal("delete", memory_id=CHENGDU.id), MemoryProposal("keep", memory_id=TEA.id))
    assert result.deletes == [(CHENGDU.id, "")] and result.keeps == [TEA.id]


def test_a_fact_added_again_then_deleted_is_not_kept():
    result = plan(MemoryProposal("add", "fact", "住在成都"), MemoryProposal("delete", memory_id=CHENGDU.id))
    assert result.deletes == [(CHENGDU.id, "")] and result.keeps == [] and result.adds == []


def test_ids_are_compared_as_uuids():
    result = plan(MemoryProposal("keep", memory_id=CHENGDU.id.upper()))
    assert result.keeps == [CHENGDU.id]


@pytest.mark.parametrize(
    "proposals",
    [
        [MemoryProposal("merge", "fact", "x")],
        [MemoryProposal("add", "opinion", "x")],
        [MemoryProposal("add", "", "x")],
        [MemoryProposal("add", "fact", "   ")],
        [MemoryProposal("add", "fact", "x" * 501)],
        [MemoryProposal("add", "fact", "bad\x00text")],
        [MemoryProposal("add", "fact", 42)],
        [MemoryProposal("update", "fact", "x", memory_id=str(uuid.uuid4()))],
        [MemoryProposal("update", "fact", "", memory_id=CHENGDU.id)],
        [MemoryProposal("delete", memory_id="not-a-uuid")],
        [MemoryProposal("delete")],
        [MemoryProposal("keep", memory_id=CHENGDU.id), MemoryProposal("delete", memory_id=CHENGDU.id)],
        [MemoryProposal("add", "fact", f"fact {n}") for n in range(21)],
        [{"action": "add", "kind": "fact", "statement": "x"}],
        "add everything",
    ],
)
def test_a_malformed_list_is_rejected_whole(proposals):
    with pytest.raises(MemoryRejected):
        consolidation_plan(proposals, held=[CHENGDU, TEA], kinds=ALL)


def test_a_kind_the_agent_does_not_keep_is_rejected():
    with pytest.raises(MemoryRejected, match="preference"):
        plan(MemoryProposal("add", "preference", "likes tea"), kinds=["fact"])


def test_no_kinds_named_means_every_kind():
    assert plan(MemoryProposal("add", "instruction", "answer in English"), kinds=[]).adds


@pytest.mark.parametrize(
    "statement",
    [
        "API key is sk-proj-abcdefghijklmnopqrstuvwx",
        "密钥sk-abcdefghijklmnopqrstuvwx1234",
        "AWS key AKIAIOSFODNN7EXAMPLE",
        "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "-----BEGIN RSA PRIVATE KEY----- MIIE",
        "uses Bearer abcdefghijklmnop1234",
        "密码是hunter2",
        "银行卡密码：123456",
        "my password is hunter2",
        "验证码为 884512",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ],
)
def test_secrets_are_found(statement):
    assert secret_found(statement)


@pytest.mark.parametrize(
    "statement", ["住在成都", "forgot their password yesterday", "likes the skiing season", "wants a PIN reset"]
)
def test_ordinary_statements_hold_no_secret(statement):
    assert secret_found(statement) is None


def test_a_secret_is_refused_without_being_repeated():
    result = plan(MemoryProposal("add", "fact", "密码是hunter2"), MemoryProposal("add", "fact", "有一只猫"))
    assert result.adds == [("fact", "有一只猫")]
    [refusal] = result.refused
    assert (refusal.action, refusal.reason, refusal.detail) == ("add", "secret", "password")
    assert "hunter2" not in repr(refusal)


def test_an_update_to_a_secret_is_refused_and_the_memory_left_as_it_is():
    result = plan(MemoryProposal("update", "fact", "api key is sk-abcdefghijklmnopqrstuvwx", memory_id=CHENGDU.id))
    assert not result.updates and result.refused[0].reason == "secret"


PHONE_REDACT = {"id": 7, "side": "input", "kind": "pii_phone", "action": "redact"}
ID_BLOCK = {"id": 8, "side": "both", "kind": "pii_id_card", "action": "block"}
OUTPUT_ONLY = {"id": 9, "side": "output", "kind": "blocked_terms", "action": "block", "terms": ["猫"]}
MODERATION = {"id": 10, "side": "input", "kind": "moderation", "action": "block", "rubric": "x", "model": {}}


def test_a_redacting_input_rule_stores_the_statement_redacted():
    result = plan(MemoryProposal("add", "fact", "手机号13812345678"), rules=[PHONE_REDACT])
    assert result.adds == [("fact", "手机号[redacted:phone]")]


def test_a_blocking_input_rule_refuses_the_proposal():
    result = plan(MemoryProposal("add", "fact", "身份证号11010519491231002X"), rules=[ID_BLOCK, PHONE_REDACT])
    assert not result.adds
    assert [(r.reason, r.detail) for r in result.refused] == [("guardrail", "rule 8")]


def test_output_rules_and_moderation_do_not_screen_memories():
    result = plan(MemoryProposal("add", "fact", "有一只猫"), rules=[OUTPUT_ONLY, MODERATION])
    assert result.adds == [("fact", "有一只猫")]


def test_redacted_statements_are_compared_as_stored():
    held = Held(id=str(uuid.uuid4()), kind="fact", statement="手机号[redacted:phone]")
    result = plan(MemoryProposal("add", "fact", "手机号13812345678"), held=[held], rules=[PHONE_REDACT])
    assert result.keeps == [held.id] and not result.adds
