"""memory_apply against the database: each change one MemoryChange row in one transaction, the
same fact never twice, a changed fact replacing the old one, malformed lists writing nothing,
personal data redacted, secrets refused; corrections, deletions, expiry and search."""

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.models import Message
from engine.retention import retention_sweep
from memory.models import Memory, MemoryChange
from memory.services import (
    MemoryProposal,
    MemoryRejected,
    memories_expire,
    memories_used,
    memory_apply,
    memory_correct,
    memory_delete,
    memory_held,
    memory_scope,
    memory_search,
)
from tests.support.factories import make_agent, make_user
from tests.support.ledger import ledger_run
from workspaces.defaults import default_workspace_id

pytestmark = pytest.mark.django_db

SCOPE = "agent:1"
KINDS = ["fact", "preference", "event", "instruction"]


def apply(owner, *proposals, end_user="u1", ttl_days=None, **options):
    return memory_apply(
        workspace_id=default_workspace_id(),
        scope=options.pop("scope", SCOPE),
        owner_id=owner.pk,
        end_user=end_user,
        proposals=list(proposals),
        source=options.pop("source", "extraction"),
        kinds=options.pop("kinds", KINDS),
        ttl_days=ttl_days,
        **options,
    )


def held(owner, end_user="u1", scope=SCOPE) -> list[str]:
    return [
        m.statement
        for m in memory_held(workspace_id=default_workspace_id(), scope=scope, owner_id=owner.pk, end_user=end_user)
    ]


def test_the_scope_is_the_shared_space_else_the_agent_s_own():
    assert memory_scope({"agent": {"id": 4}, "memory": {"space": ""}}) == "agent:4"
    assert memory_scope({"agent": {"id": 4}, "memory": {"space": "support"}}) == "support"


def test_an_add_writes_the_memory_with_its_source_and_a_change_row(owner):
    run = ledger_run(make_agent())
    message = Message.objects.create(conversation=run.conversation, run=run, order=1, role="user", content="我在成都")

    [change] = apply(owner, MemoryProposal("add", "fact", "住在成都"), run=run, message=message, ttl_days=30)

    memory = Memory.objects.get()
    assert (memory.scope, memory.owner, memory.end_user, memory.kind) == (SCOPE, owner, "u1", "fact")
    assert (memory.statement, memory.source_run, memory.source_message) == ("住在成都", run, message)
    assert "成都" in memory.terms["jieba"] and "成都" in memory.terms["trigram"]
    assert timedelta(days=29) < memory.expires_at - timezone.now() <= timedelta(days=30)
    assert (change.pk, change.memory, change.action, change.source) == (change.pk, memory, "add", "extraction")
    assert (change.before, change.after, change.run, change.end_user) == ("", "住在成都", run, "u1")


def test_the_same_fact_told_again_is_kept_not_stored_twice(owner):
    apply(owner, MemoryProposal("add", "fact", "住在成都"), ttl_days=30)
    Memory.objects.update(last_used_at=None, expires_at=timezone.now() + timedelta(days=1))

    result = apply(owner, MemoryProposal("add", "fact", "住在成都。"), ttl_days=30)

    assert result == [] and len(result.kept) == 1
    memory = Memory.objects.get()
    assert memory.last_used_at is not None and memory.expires_at > timezone.now() + timedelta(days=29)
    assert MemoryChange.objects.count() == 1


def test_moving_to_chongqing_supersedes_living_in_chengdu(owner):
    [added] = apply(owner, MemoryProposal("add", "fact", "住在成都"))
    memory_id = str(added.memory_id)

    [change] = apply(owner, MemoryProposal("update", "fact", "住在重庆", memory_id=memory_id))

    assert held(owner) == ["住在重庆"]
    assert (change.action, change.before, change.after, str(change.memory_id)) == (
        "update",
        "住在成都",
        "住在重庆",
        memory_id,
    )
    assert "重庆" in Memory.objects.get().terms["jieba"]


def test_a_delete_removes_the_memory_and_its_change_keeps_what_it_said(owner):
    [added] = apply(owner, MemoryProposal("add", "fact", "住在成都"))

    [change] = apply(owner, MemoryProposal("delete", memory_id=str(added.memory_id)))

    assert not Memory.objects.exists()
    change.refresh_from_db()
    assert (change.action, change.before, change.memory) == ("delete", "住在成都", None)


@pytest.mark.parametrize(
    "proposals",
    [
        [MemoryProposal("add", "fact", "有一只猫"), MemoryProposal("add", "opinion", "x")],
        [
            MemoryProposal("add", "fact", "有一只猫"),
            MemoryProposal("delete", memory_id="00000000-0000-0000-0000-000000000000"),
        ],
        [MemoryProposal("add", "fact", "有一只猫"), MemoryProposal("add", "fact", "")],
        [MemoryProposal("add", "fact", f"fact {n}") for n in range(21)],
    ],
)
def test_a_malformed_list_writes_nothing(owner, proposals):
    apply(owner, MemoryProposal("add", "fact", "住在成都"))

    with pytest.raises(MemoryRejected):
        apply(owner, *proposals)

    assert held(owner) == ["住在成都"] and MemoryChange.objects.count() == 1


def test_only_the_end_user_s_own_memories_can_be_updated(owner):
    [other] = apply(make_user(), MemoryProposal("add", "fact", "住在成都"))
    [elsewhere] = apply(owner, MemoryProposal("add", "fact", "住在成都"), scope="agent:2")

    for memory_id in (other.memory_id, elsewhere.memory_id):
        with pytest.raises(MemoryRejected):
            apply(owner, MemoryProposal("delete", memory_id=str(memory_id)))
    assert Memory.objects.count() == 2


def test_personal_data_is_redacted_or_blocked_by_the_agent_s_input_rules(owner):
    rules = [
        {"id": 1, "side": "input", "kind": "pii_id_card", "action": "block"},
        {"id": 2, "side": "both", "kind": "pii_phone", "action": "redact"},
    ]
    result = apply(
        owner,
        MemoryProposal("add", "fact", "手机号是13812345678"),
        MemoryProposal("add", "fact", "身份证号11010519491231002X"),
        guardrails=rules,
    )

    assert held(owner) == ["手机号是[redacted:phone]"]
    assert [(r.reason, r.detail) for r in result.refused] == [("guardrail", "rule 1")]
    assert not Memory.objects.filter(statement__contains="1101051949").exists()
    assert not MemoryChange.objects.filter(after__contains="13812345678").exists()


def test_a_secret_is_never_stored(owner):
    result = apply(owner, MemoryProposal("add", "fact", "OpenAI key sk-abcdefghijklmnopqrstuvwxyz123"))

    assert result == [] and result.refused[0].reason == "secret"
    assert not Memory.objects.exists() and not MemoryChange.objects.exists()


def test_memories_past_their_lifetime_are_not_held_and_expire_with_a_change_row(owner):
    apply(owner, MemoryProposal("add", "fact", "住在成都"), MemoryProposal("add", "fact", "有一只猫"), ttl_days=10)
    apply(owner, MemoryProposal("add", "preference", "喜欢喝茶"))  # no lifetime: kept until removed
    Memory.objects.filter(statement="住在成都").update(expires_at=timezone.now() - timedelta(seconds=1))

    assert held(owner) == ["喜欢喝茶", "有一只猫"]
    assert memories_expire() == 1
    assert memories_expire(now=timezone.now() + timedelta(days=11)) == 1

    assert set(Memory.objects.values_list("statement", flat=True)) == {"喜欢喝茶"}
    expired = MemoryChange.objects.filter(action="expire").order_by("before")
    assert [(c.before, c.memory_id, c.end_user) for c in expired] == [
        ("住在成都", None, "u1"),
        ("有一只猫", None, "u1"),
    ]


def test_the_daily_retention_sweep_expires_memories(owner):
    apply(owner, MemoryProposal("add", "fact", "住在成都"), ttl_days=1)
    Memory.objects.update(expires_at=timezone.now() - timedelta(minutes=1))

    assert retention_sweep()["memories_expired"] == 1
    assert not Memory.objects.exists()


def test_a_memory_shown_to_a_run_lives_its_lifetime_again(owner):
    [added] = apply(owner, MemoryProposal("add", "fact", "住在成都"), ttl_days=1)
    later = timezone.now() + timedelta(hours=20)

    assert memories_used(memory_ids=[added.memory_id], ttl_days=7, now=later) == 1

    memory = Memory.objects.get()
    assert memory.last_used_at == later and memory.expires_at == later + timedelta(days=7)


def test_search_puts_the_relevant_memories_first_and_fills_up_with_the_newest(owner):
    for statement in ("住在成都", "喜欢喝绿茶", "有一只猫叫咪咪", "对花生过敏"):
        apply(owner, MemoryProposal("add", "fact", statement))
    search = dict(workspace_id=default_workspace_id(), scope=SCOPE, owner_id=owner.pk, end_user="u1")

    assert [m.statement for m in memory_search(**search, query="成都明天天气如何？", limit=2)] == [
        "住在成都",
        "对花生过敏",
    ]
    assert memory_search(**search, query="我的猫怎么样", limit=1)[0].statement == "有一只猫叫咪咪"
    assert [m.statement for m in memory_search(**search, query="", limit=3)] == [
        "对花生过敏",
        "有一只猫叫咪咪",
        "喜欢喝绿茶",
    ]
    assert memory_search(**search, query="成都", limit=0) == []
    assert (
        memory_search(
            workspace_id=default_workspace_id(), scope=SCOPE, owner_id=owner.pk, end_user="u2", query="成都", limit=5
        )
        == []
    )


def test_an_operator_corrects_a_memory_with_a_change_row(owner):
    operator = make_user(staff=True)
    added, _cat = apply(owner, MemoryProposal("add", "fact", "住在成都"), MemoryProposal("add", "fact", "有一只猫"))
    memory = Memory.objects.get(pk=added.memory_id)

    change = memory_correct(memory=memory, statement=" 住在 重庆 ", changed_by=operator)

    memory.refresh_from_db()
    assert memory.statement == "住在 重庆" and "重庆" in memory.terms["jieba"]
    assert (change.action, change.source, change.before, change.after, change.changed_by) == (
        "update",
        "operator",
        "住在成都",
        "住在 重庆",
        operator,
    )
    for statement in ("", "x" * 501, "住在 重庆", "有一只猫。", "password: hunter22"):
        with pytest.raises(MemoryRejected):
            memory_correct(memory=memory, statement=statement, changed_by=operator)
    assert MemoryChange.objects.filter(action="update").count() == 1


def test_a_deletion_through_the_api_says_so_and_who_asked(owner):
    [added] = apply(owner, MemoryProposal("add", "fact", "住在成都"))

    change = memory_delete(memory=Memory.objects.get(pk=added.memory_id), changed_by=owner, source="api")

    assert not Memory.objects.exists()
    change.refresh_from_db()
    assert (change.action, change.source, change.before, change.changed_by) == ("delete", "api", "住在成都", owner)
