"""Writing and reading long-term memories: consolidation (memory_apply), an operator's or the
API's correction and deletion, expiry, and the search a run's first step makes.

Every change is one MemoryChange row, written in the same transaction as the change. The rules
that decide what a list of proposals does are pure, in memory.consolidation; this module reads
what is held and writes what they decided.

Search is knowledge.keyword's BM25 over the term counts stored with each memory and, when the
version names a memory embedding model (snapshot["memory"]["embedding_model"]), the cosine of
the query's vector with each memory's, the rankings fused like a knowledge base's
(knowledge.retrieval.rrf). A person's memories are few (tens to hundreds), so they are scored in
Python, like a small knowledge base.

A vector is stored with the model that made it ({"model": "<config id>:<model>", "vector": [...]}),
so a memory embedded by another model is never compared with this one's query; it is embedded
again, like a memory stored without one (the endpoint failed, or it was written before the
agent named a model, or corrected since), by the next search. Every embedding call belongs to a
run (the LLMCall rows of purpose embedding, like a knowledge search's): an operator's
correction has none, so it clears the vector instead of leaving one of the old statement.
An endpoint that fails costs a memory its vector, never the memory: it is stored without one,
a search falls back to keyword, and both are logged.
"""

import hashlib
import logging
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import ModelConfig
from agents.snapshot import AgentSnapshot, snapshot_memory
from knowledge.embeddings import BATCH, EmbeddingFailed, cosine, embed
from knowledge.keyword import bm25, term_counts
from knowledge.models import KeywordMethod
from knowledge.retrieval import rrf
from memory.channels import OWNER_CHANNEL
from memory.consolidation import (
    STATEMENT_MAX_CHARS,
    Held,
    MemoryProposal,
    MemoryRejected,
    Refusal,
    consolidation_plan,
    secret_found,
    statement_clean,
    statement_key,
)
from memory.models import Memory, MemoryChange

log = logging.getLogger(__name__)

__all__ = [
    "MemoryApplied",
    "MemoryProposal",
    "MemoryRejected",
    "Refusal",
    "memories_expire",
    "memories_used",
    "memory_apply",
    "memory_correct",
    "memory_correction_check",
    "memory_delete",
    "memory_embedding_model",
    "memory_held",
    "memory_scope",
    "memory_search",
    "memory_vectors",
]

EXPIRE_BATCH = 500


class MemoryApplied(list):
    """The MemoryChange rows memory_apply wrote, and what it did besides: the proposals it
    refused (a secret, a blocking guardrail rule; nothing written for them) and the ids of the
    memories it confirmed (their lifetime started again; no change row)."""

    def __init__(self, changes: list[MemoryChange], *, refused: list[Refusal], kept: list[str]):
        super().__init__(changes)
        self.refused = refused
        self.kept = kept


def memory_scope(snapshot: AgentSnapshot) -> str:
    """Whose memories a run of this version reads and writes: its shared space's, else its agent's."""
    return snapshot["memory"]["space"] or f"agent:{snapshot['agent']['id']}"


def memory_embedding_model(snapshot: AgentSnapshot) -> ModelConfig | None:
    """The embedding model a run of this version finds its memories with: the model config the
    version pins, with its endpoint, model and timeouts as pinned (the key and prices are the
    row's, as for the agent's own model). None, with no query, when the version names none; None
    too when its config has been deleted since (keyword search only, logged)."""
    memory = snapshot_memory(snapshot)
    pinned = memory.get("embedding_model") if memory else None
    if not pinned:
        return None
    config = ModelConfig.objects.filter(pk=pinned["id"]).first()
    if config is None:
        log.warning("memory embedding model %s is gone: keyword search only", pinned["id"])
        return None
    config.base_url, config.model = pinned["base_url"], pinned["model"]
    config.connect_timeout_seconds = pinned["connect_timeout_seconds"]
    config.read_timeout_seconds = pinned["read_timeout_seconds"]
    return config


def _vector_model(config: ModelConfig) -> str:
    """What a stored vector says made it: vectors of two models are not comparable."""
    return f"{config.pk}:{config.model}"


def _vector(memory: Memory, model: str) -> list[float] | None:
    stored = memory.embedding
    return stored["vector"] if isinstance(stored, dict) and stored.get("model") == model else None


def _embedded(statements: list[str], *, embedding_model: ModelConfig | None, run) -> dict[str, dict]:
    """The stored embedding of each statement, in one call on `run`; none without a model or a
    run, or when the endpoint fails (logged): those memories are stored without a vector and
    found by keyword until a search embeds them."""
    statements = list(dict.fromkeys(statements))
    if embedding_model is None or run is None or not statements:
        return {}
    try:
        vectors = embed(statements, config=embedding_model, run=run)
    except EmbeddingFailed as exc:
        log.warning("run %s: memories stored without vectors: %s", run.pk, exc)
        return {}
    model = _vector_model(embedding_model)
    return {statement: {"model": model, "vector": vector} for statement, vector in zip(statements, vectors)}


def _vector_ranking(query: str, held: list[Memory], *, embedding_model: ModelConfig, run) -> list[int]:
    """Indexes into `held` of the memories whose vector points the query's way (cosine above 0),
    nearest first. One embedding call: the query, and the statements of the newest memories
    that have no vector of this model yet, which are stored with theirs. [] when the endpoint
    fails (logged): the search is keyword only."""
    model = _vector_model(embedding_model)
    # One call, however many lack a vector: the rest are embedded by the searches after this.
    missing = [memory for memory in held if _vector(memory, model) is None][: BATCH - 1]
    statements = list(dict.fromkeys(memory.statement for memory in missing))
    try:
        query_vector, *vectors = embed([query, *statements], config=embedding_model, run=run)
    except EmbeddingFailed as exc:
        log.warning("run %s: memory search by keyword only: %s", run.pk, exc)
        return []
    fresh = dict(zip(statements, vectors))
    for memory in missing:
        memory.embedding = {"model": model, "vector": fresh[memory.statement]}
        # Not if the statement changed meanwhile (the vector would be the old one's); an update
        # leaves updated_at alone, so a memory is not made newer by being embedded.
        Memory.objects.filter(pk=memory.pk, statement=memory.statement).update(embedding=memory.embedding)
    vectors_held = ((index, _vector(memory, model)) for index, memory in enumerate(held))
    scores = [(index, cosine(query_vector, vector)) for index, vector in vectors_held if vector is not None]
    return [index for index, score in sorted(scores, key=lambda item: (-item[1], item[0])) if score > 0]


def _expiry(now: datetime, ttl_days: int | None) -> datetime | None:
    return None if ttl_days is None else now + timedelta(days=ttl_days)


def _held(*, workspace_id: int, scope: str, owner_id: int | None, channel: str, end_user: str, now: datetime):
    """The end user's unexpired memories: the key is all five of workspace (a space's name is
    the workspace's own: "support" in two workspaces is two spaces), scope, owner, channel
    (memory.channels) and end user id, in every read and write."""
    return Memory.objects.filter(
        workspace_id=workspace_id, scope=scope, owner_id=owner_id, channel=channel, end_user=end_user
    ).filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))


def memory_held(
    *,
    workspace_id: int,
    scope: str,
    owner_id: int | None,
    end_user: str,
    channel: str = OWNER_CHANNEL,
    kinds: list[str] | None = None,
) -> list[Memory]:
    """The end user's unexpired memories in this scope and channel, newest first; only those of
    `kinds` if given (the kinds a version keeps: an operator who stops keeping one stops it being
    shown too)."""
    held = _held(
        workspace_id=workspace_id,
        scope=scope,
        owner_id=owner_id,
        channel=channel,
        end_user=end_user,
        now=timezone.now(),
    )
    if kinds:
        held = held.filter(kind__in=kinds)
    return list(held.order_by("-updated_at", "pk"))


def memory_search(
    *,
    workspace_id: int,
    scope: str,
    owner_id: int | None,
    end_user: str,
    query: str,
    limit: int,
    channel: str = OWNER_CHANNEL,
    kinds: list[str] | None = None,
    embedding_model: ModelConfig | None = None,
    run=None,
) -> list[Memory]:
    """Up to `limit` memories, most relevant to `query` first: BM25 under both of knowledge.keyword's
    ways of cutting text (jieba words and character n-grams) and, with an `embedding_model`, the
    cosine of their vectors with the query's (one embedding call, on `run`), fused by reciprocal
    rank; when fewer match, the newest of the others fill up (a question such as "明天天气如何？"
    shares no word with "住在成都", which it needs all the same). Only the end user's memories in
    `channel`, and of `kinds` if given (memory_held)."""
    if limit <= 0:
        return []
    held = memory_held(
        workspace_id=workspace_id, scope=scope, owner_id=owner_id, channel=channel, end_user=end_user, kinds=kinds
    )
    rankings = []
    if query.strip():
        for method in KeywordMethod.values:
            documents = [(index, memory.terms.get(method, {})) for index, memory in enumerate(held)]
            rankings.append([index for index, _score in bm25(query, documents, method=method)])
        if held and embedding_model is not None and run is not None:
            rankings.append(_vector_ranking(query, held, embedding_model=embedding_model, run=run))
    matched = [index for index, _score in rrf(rankings)]
    # Ties and the rest in the held order: newest first.
    order = list(dict.fromkeys([*matched, *range(len(held))]))
    return [held[index] for index in order[:limit]]


def memories_used(*, memory_ids: list, ttl_days: int | None, now: datetime | None = None) -> int:
    """Mark memories a run was shown as used now: their lifetime (`ttl_days`, the version's
    memory lifetime) starts again."""
    now = now or timezone.now()
    return Memory.objects.filter(pk__in=memory_ids).update(last_used_at=now, expires_at=_expiry(now, ttl_days))


def _written(plan) -> list[str]:
    return [statement for _kind, statement in plan.adds] + [statement for _id, _kind, statement in plan.updates]


def memory_vectors(
    *,
    workspace_id: int,
    scope: str,
    owner_id: int | None,
    end_user: str,
    proposals: list[MemoryProposal],
    kinds: list[str],
    channel: str = OWNER_CHANNEL,
    guardrails: list | None = None,
    embedding_model: ModelConfig | None = None,
    run=None,
) -> dict[str, dict]:
    """The vectors of the statements memory_apply would write, by statement: planned against
    the memories held now, unlocked, and embedded in one call on `run`, outside any transaction
    (a slow endpoint holds no lock: consolidating this end user's memories waits on nobody's
    call). {} without a model or a run, for proposals the plan refuses as a whole, or when the
    endpoint fails (logged)."""
    if embedding_model is None or run is None:
        return {}
    now = timezone.now()
    key = {"scope": scope, "owner_id": owner_id, "channel": channel, "end_user": end_user}
    rows = _held(workspace_id=workspace_id, now=now, **key).order_by("pk")
    held = [Held(id=str(memory.pk), kind=memory.kind, statement=memory.statement) for memory in rows]
    try:
        plan = consolidation_plan(proposals, held=held, kinds=kinds, rules=guardrails)
    except MemoryRejected:
        return {}  # memory_apply refuses it again, under the lock, and says why
    return _embedded(_written(plan), embedding_model=embedding_model, run=run)


def memory_apply(
    *,
    workspace_id: int,
    scope: str,
    owner_id: int | None,
    end_user: str,
    proposals: list[MemoryProposal],
    source: str,
    kinds: list[str],
    ttl_days: int | None,
    channel: str = OWNER_CHANNEL,
    guardrails: list | None = None,
    run=None,
    message=None,
    llm_call=None,
    changed_by=None,
    embedding_model: ModelConfig | None = None,
    vectors: dict[str, dict] | None = None,
) -> MemoryApplied:
    """Consolidate proposed changes into the end user's memories in `scope` and `channel` (the
    channel that vouched for the end user, memory.channels), in one transaction:
    the rules are memory.consolidation's (a malformed list raises MemoryRejected and writes
    nothing). Adds and updates come from `run` and `message`; kept and confirmed memories live
    `ttl_days` from now. `guardrails` are the rules of the version's snapshot
    (snapshot["guardrails"]["rules"]). With an `embedding_model` (memory_embedding_model) and a
    `run`, the statements added or changed are embedded in one call on the run, before the
    transaction (memory_vectors; `vectors`, if the caller made that call before a transaction of
    its own); a failing endpoint, or a statement the plan came to only under the lock, stores
    them without vectors, and the next search embeds them. Returns the change rows written (a MemoryApplied,
    which also lists the refused proposals and the memories kept)."""
    if source not in MemoryChange.Source.values:
        raise ValueError(f"unknown memory change source {source!r}")
    now = timezone.now()
    audit = {
        "workspace_id": workspace_id,
        "scope": scope,
        "owner_id": owner_id,
        "channel": channel,
        "end_user": end_user,
        "source": source,
        "run": run,
        "llm_call": llm_call,
        "changed_by": changed_by,
    }
    if vectors is None:
        vectors = memory_vectors(
            workspace_id=workspace_id,
            scope=scope,
            owner_id=owner_id,
            channel=channel,
            end_user=end_user,
            proposals=proposals,
            kinds=kinds,
            guardrails=guardrails,
            embedding_model=embedding_model,
            run=run,
        )
    with transaction.atomic():
        # Two runs of one end user ending together consolidate one after the other: the held
        # rows are locked, and so is the end user's scope itself, which also covers the first
        # memory (no row to lock yet).
        key = {"scope": scope, "owner_id": owner_id, "channel": channel, "end_user": end_user}
        _end_user_lock(workspace_id=workspace_id, **key)
        rows = {
            str(memory.pk): memory
            for memory in _held(workspace_id=workspace_id, now=now, **key).select_for_update().order_by("pk")
        }
        held = [Held(id=key, kind=memory.kind, statement=memory.statement) for key, memory in rows.items()]
        plan = consolidation_plan(proposals, held=held, kinds=kinds, rules=guardrails)
        expires_at = _expiry(now, ttl_days)
        changes = []
        for kind, statement in plan.adds:
            memory = Memory.objects.create(
                workspace_id=workspace_id,
                scope=scope,
                owner_id=owner_id,
                channel=channel,
                end_user=end_user,
                kind=kind,
                statement=statement,
                terms=term_counts(statement),
                embedding=vectors.get(statement),
                source_run=run,
                source_message=message,
                last_used_at=now,
                expires_at=expires_at,
            )
            changes.append(
                MemoryChange(
                    memory=memory,
                    action=MemoryChange.Action.ADD,
                    after=statement,
                    **audit,
                )
            )
        for memory_id, kind, statement in plan.updates:
            memory = rows[memory_id]
            before = memory.statement
            memory.kind, memory.statement, memory.terms = kind, statement, term_counts(statement)
            memory.embedding = vectors.get(statement)
            memory.last_used_at, memory.expires_at = now, expires_at
            if run is not None:  # the statement now comes from this run
                memory.source_run, memory.source_message = run, message
            memory.save()
            changes.append(
                MemoryChange(
                    memory=memory,
                    action=MemoryChange.Action.UPDATE,
                    before=before,
                    after=statement,
                    **audit,
                )
            )
        for memory_id, reason in plan.deletes:
            memory = rows[memory_id]
            changes.append(
                MemoryChange(
                    memory=memory,
                    action=MemoryChange.Action.DELETE,
                    before=memory.statement,
                    reason=reason,
                    **audit,
                )
            )
        MemoryChange.objects.bulk_create(changes)
        # After their change rows, which keep what they said (their link is cleared).
        Memory.objects.filter(pk__in=[memory_id for memory_id, _reason in plan.deletes]).delete()
        if plan.keeps:
            Memory.objects.filter(pk__in=plan.keeps).update(last_used_at=now, expires_at=expires_at)
    for refusal in plan.refused:
        log.info("memory %s refused for %s: %s (%s)", refusal.action, scope, refusal.reason, refusal.detail)
    return MemoryApplied(changes, refused=plan.refused, kept=plan.keeps)


def _end_user_lock(*, workspace_id: int, scope: str, owner_id: int | None, channel: str, end_user: str) -> None:
    """Hold the end user's memories in `scope` and `channel` until the transaction ends. On
    PostgreSQL a transaction-level advisory lock on a hash of the five parts of the key; SQLite
    runs one writer at a time."""
    if connection.vendor != "postgresql":
        return
    parts = f"{workspace_id}\x00{scope}\x00{owner_id}\x00{channel}\x00{end_user}"
    key = hashlib.blake2b(parts.encode(), digest_size=8).digest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(key, "big", signed=True)])


def _locked(memory: Memory) -> Memory:
    """The memory's row, locked until the transaction ends; Memory.DoesNotExist if it is gone."""
    return Memory.objects.select_for_update().get(pk=memory.pk)


def memory_correction_check(*, memory: Memory, statement: str) -> str:
    """The statement as a correction of `memory` would store it, or MemoryRejected: empty, too
    long, unchanged, holding a secret, or what another memory of the same end user says."""
    statement = statement_clean(statement)
    if not statement or len(statement) > STATEMENT_MAX_CHARS:
        raise MemoryRejected(_("A statement has 1 to %(max)d characters.") % {"max": STATEMENT_MAX_CHARS})
    if statement == memory.statement:
        raise MemoryRejected(_("The statement is unchanged."))
    if secret_found(statement):
        raise MemoryRejected(_("Memories never hold secrets (keys, tokens, passwords)."))
    key = statement_key(statement)
    others = _held(
        workspace_id=memory.workspace_id,
        scope=memory.scope,
        owner_id=memory.owner_id,
        channel=memory.channel,
        end_user=memory.end_user,
        now=timezone.now(),
    )
    said = others.exclude(pk=memory.pk).values_list("statement", flat=True)
    if any(statement_key(other) == key for other in said):
        raise MemoryRejected(_("Another memory of this end user already says this: delete this one instead."))
    return statement


def memory_correct(*, memory: Memory, statement: str, changed_by, source: str = "operator") -> MemoryChange:
    """A person's correction of a memory's statement (an operator in the admin, or the API), with
    its change row. MemoryRejected as memory_correction_check says. Its vector is cleared (it was
    the old statement's): a correction has no run to embed on, the next search embeds it."""
    with transaction.atomic():
        memory = _locked(memory)
        statement = memory_correction_check(memory=memory, statement=statement)
        before = memory.statement
        memory.statement, memory.terms, memory.embedding = statement, term_counts(statement), None
        memory.save(update_fields=["statement", "terms", "embedding", "updated_at"])
        return MemoryChange.objects.create(
            memory=memory,
            workspace_id=memory.workspace_id,
            scope=memory.scope,
            owner_id=memory.owner_id,
            channel=memory.channel,
            end_user=memory.end_user,
            action=MemoryChange.Action.UPDATE,
            source=source,
            before=before,
            after=statement,
            changed_by=changed_by,
        )


def memory_delete(*, memory: Memory, changed_by, source: str, reason: str = "") -> MemoryChange:
    """Delete a memory; its change row keeps what it said."""
    with transaction.atomic():
        memory = _locked(memory)
        change = MemoryChange.objects.create(
            memory=memory,
            workspace_id=memory.workspace_id,
            scope=memory.scope,
            owner_id=memory.owner_id,
            channel=memory.channel,
            end_user=memory.end_user,
            action=MemoryChange.Action.DELETE,
            source=source,
            before=memory.statement,
            changed_by=changed_by,
            reason=reason,
        )
        memory.delete()
    change.memory = None
    return change


def memories_expire(now: datetime | None = None) -> int:
    """Delete the memories whose lifetime ended, each with an expire change row; the count.
    In batches, each its own transaction, so a large backlog holds no long lock."""
    now = now or timezone.now()
    expired = 0
    while True:
        with transaction.atomic():
            batch = list(
                Memory.objects.select_for_update()
                .filter(expires_at__lte=now)
                .order_by("expires_at", "pk")[:EXPIRE_BATCH]
            )
            if not batch:
                return expired
            MemoryChange.objects.bulk_create(
                MemoryChange(
                    memory=memory,
                    workspace_id=memory.workspace_id,
                    scope=memory.scope,
                    owner_id=memory.owner_id,
                    channel=memory.channel,
                    end_user=memory.end_user,
                    action=MemoryChange.Action.EXPIRE,
                    source=MemoryChange.Source.LIFETIME,
                    before=memory.statement,
                    reason="lifetime ended",
                )
                for memory in batch
            )
            Memory.objects.filter(pk__in=[memory.pk for memory in batch]).delete()
        expired += len(batch)
