"""What a list of proposed memory changes comes to, against the memories already held: a pure
decision (no database), so every rule is tested with plain objects.

The promise, in the order it is kept:

1. The list is well formed or nothing happens (MemoryRejected): at most 20 proposals; known
   actions; an add names a kept kind and a statement; an update names a held id and a statement
   (its kind, or the held one's if none is given, kept); a delete or keep names a held id; no id
   twice; statements of 1 to 500 characters with no control characters.
2. Secrets (keys, tokens, passwords, private keys) are never stored: such a proposal is refused.
3. The agent's input guardrail rules run on each statement: a blocking match refuses the
   proposal, a redacting one stores the redacted statement.
4. The same statement is never held twice (compared by `statement_key`: case, width, spacing
   and punctuation forms ignored): an add of a held statement keeps that memory; an update to the
   statement another memory holds deletes the updated one and keeps the other; an update to its
   own statement keeps it.

Refused proposals are reported (`Refusal`, without the statement: it may be the secret), not
stored and not audited as changes: nothing changed.
"""

import re
import unicodedata
import uuid
from dataclasses import dataclass, field

from django.utils.translation import gettext as _

from agents import guardrails
from memory.models import MemoryKind

MAX_PROPOSALS = 20
STATEMENT_MAX_CHARS = 500
ACTIONS = ("add", "update", "delete", "keep")


class MemoryRejected(ValueError):
    """A malformed list of proposals: nothing is written."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class MemoryProposal:
    action: str  # add | update | delete | keep
    kind: str = ""
    statement: str = ""
    memory_id: str | None = None


@dataclass(frozen=True)
class Held:
    """A memory already held, as the decision needs it."""

    id: str
    kind: str
    statement: str


@dataclass(frozen=True)
class Refusal:
    """A proposal that was well formed but not stored, and why (never the statement itself)."""

    action: str
    kind: str
    reason: str  # "secret" | "guardrail"
    detail: str  # which secret or which rule, for the log and the tool's answer


@dataclass
class Plan:
    adds: list[tuple[str, str]] = field(default_factory=list)  # (kind, statement)
    updates: list[tuple[str, str, str]] = field(default_factory=list)  # (id, kind, statement)
    deletes: list[tuple[str, str]] = field(default_factory=list)  # (id, reason)
    keeps: list[str] = field(default_factory=list)  # ids confirmed: their lifetime starts again
    refused: list[Refusal] = field(default_factory=list)


# Full-width and CJK punctuation that NFKC leaves alone, as the ASCII it stands for.
_PUNCTUATION = str.maketrans(
    {
        "。": ".",
        "、": ",",
        "「": '"',
        "」": '"',
        "『": '"',
        "』": '"',
        "“": '"',
        "”": '"',
        "‘": "'",
        "’": "'",
        "【": "[",
        "】": "]",
        "《": "<",
        "》": ">",
        "〈": "<",
        "〉": ">",
        "…": "...",
    }
)
_CJK = r"\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_SPACE_AROUND_PUNCTUATION = re.compile(r"\s*([^\w\s])\s*")
_SPACE_BY_CJK = re.compile(rf"(?<=[{_CJK}])\s+|\s+(?=[{_CJK}])")
_TRAILING = ".!?;,:~ "


def statement_clean(text: str) -> str:
    """A statement as it is stored: trimmed, each run of whitespace (line breaks too) one space."""
    return " ".join(text.split())


def statement_key(text: str) -> str:
    """What two statements share when they say the same thing in another form: compatibility
    forms folded (full-width letters, digits and punctuation become ASCII), case folded, spaces
    dropped around punctuation and CJK characters, final punctuation dropped."""
    text = unicodedata.normalize("NFKC", text).translate(_PUNCTUATION).casefold()
    text = " ".join(text.split())
    text = _SPACE_AROUND_PUNCTUATION.sub(r"\1", text)
    text = _SPACE_BY_CJK.sub("", text)
    return text.rstrip(_TRAILING)


# Secrets, by what they look like. Bounded repetitions only, and statements are at most 500
# characters, so no input makes a scan slow. A word before a key is told apart by a lookbehind,
# not \b: a Chinese character counts as a word character ("密钥sk-...").
_SECRETS = (
    ("private_key", re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY")),
    ("api_key", re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}")),
    ("aws_access_key", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])")),
    ("github_token", re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("slack_token", re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}")),
    ("google_api_key", re.compile(r"(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35}")),
    ("jwt", re.compile(r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer_token", re.compile(r"(?i)(?<![a-z])bearer\s+[A-Za-z0-9._~+/=-]{16,}")),
    (
        "password",
        re.compile(
            r"(?i)(?:(?<![a-z])(?:password|passcode|passwd|pwd|pin|api[ _-]?key|secret[ _-]?key|access[ _-]?token)"
            r"|密码|口令|密钥|验证码)\s{0,3}(?:is|was|[:：=]|是|为|為)\s{0,3}[^\s,.。，]"
        ),
    ),
)


def secret_found(text: str) -> str | None:
    """The kind of secret `text` holds (api_key, password, ...), or None."""
    for name, pattern in _SECRETS:
        if pattern.search(text):
            return name
    return None


def _statement(proposal: MemoryProposal, index: int) -> str:
    if not isinstance(proposal.statement, str):
        raise MemoryRejected(_("Change %(n)d: the statement must be text.") % {"n": index})
    statement = statement_clean(proposal.statement)
    if not statement:
        raise MemoryRejected(_("Change %(n)d: the statement is empty.") % {"n": index})
    if len(statement) > STATEMENT_MAX_CHARS:
        raise MemoryRejected(
            _("Change %(n)d: the statement is longer than %(max)d characters.")
            % {"n": index, "max": STATEMENT_MAX_CHARS}
        )
    # PostgreSQL stores neither NUL nor lone surrogates; other control characters have no place
    # in a sentence.
    if any(unicodedata.category(char) in ("Cc", "Cs") for char in statement):
        raise MemoryRejected(_("Change %(n)d: the statement holds control characters.") % {"n": index})
    return statement


def _held_id(proposal: MemoryProposal, index: int, held: dict[str, Held]) -> str:
    try:
        memory_id = str(uuid.UUID(str(proposal.memory_id)))
    except ValueError:
        memory_id = None
    if proposal.memory_id is None or memory_id not in held:
        raise MemoryRejected(
            _("Change %(n)d: %(id)s is not a memory held for this user.") % {"n": index, "id": proposal.memory_id}
        )
    return memory_id


def _kind(kind: str, index: int, kinds: list[str]) -> str:
    if kind not in kinds:
        raise MemoryRejected(
            _("Change %(n)d: kind %(kind)r is not one this agent keeps (%(kinds)s).")
            % {"n": index, "kind": kind, "kinds": ", ".join(kinds)}
        )
    return kind


def proposals_checked(
    proposals: list[MemoryProposal], *, held: dict[str, Held], kinds: list[str]
) -> list[tuple[MemoryProposal, str | None, str, str]]:
    """Each proposal as (proposal, held id, kind, cleaned statement), or MemoryRejected for the
    first thing wrong with the list."""
    if not isinstance(proposals, list):
        raise MemoryRejected(_("The changes must be a list."))
    if len(proposals) > MAX_PROPOSALS:
        raise MemoryRejected(_("At most %(max)d changes at a time.") % {"max": MAX_PROPOSALS})
    checked, seen = [], set()
    for index, proposal in enumerate(proposals, start=1):
        if not isinstance(proposal, MemoryProposal) or proposal.action not in ACTIONS:
            action = getattr(proposal, "action", None)
            raise MemoryRejected(_("Change %(n)d: unknown action %(action)r.") % {"n": index, "action": action})
        if not isinstance(proposal.kind, str):
            raise MemoryRejected(_("Change %(n)d: the kind must be text.") % {"n": index})
        memory_id, kind, statement = None, "", ""
        if proposal.action == "add":
            kind = _kind(proposal.kind, index, kinds)
            statement = _statement(proposal, index)
        else:
            memory_id = _held_id(proposal, index, held)
            if memory_id in seen:
                raise MemoryRejected(_("Change %(n)d: memory %(id)s is changed twice.") % {"n": index, "id": memory_id})
            seen.add(memory_id)
            if proposal.action == "update":
                # The held kind when none is given, which must be kept too: an operator who stops
                # keeping a kind stops its memories being rewritten, not only added.
                kind = _kind(proposal.kind or held[memory_id].kind, index, kinds)
                statement = _statement(proposal, index)
        checked.append((proposal, memory_id, kind, statement))
    return checked


def _screened(statement: str, rules: list) -> tuple[str, str, str]:
    """The statement as it may be stored, or why it may not: (statement, "", "") or
    ("", reason, detail)."""
    secret = secret_found(statement)
    if secret:
        return "", "secret", secret
    hits = guardrails.scan(rules, statement)
    if guardrails.blocked(hits):
        rule = next(hit.rule_id for hit in hits if hit.action == guardrails.ACTION_BLOCK)
        return "", "guardrail", f"rule {rule}"
    if hits:
        statement = guardrails.redacted(statement, hits)
        # A placeholder may be longer than what it replaces.
        if len(statement) > STATEMENT_MAX_CHARS:
            return "", "guardrail", "too long once redacted"
    return statement, "", ""


def input_rules(rules: list | None) -> list:
    """The rules among an agent's guardrails (as its snapshot pins them) that screen what is
    written: the input side's, except moderation (a model call; a statement is short and comes
    from the model or the agent's own tool, whose input was moderated already)."""
    return [
        rule
        for rule in rules or []
        if guardrails.rule_applies(rule, guardrails.SIDE_INPUT) and rule["kind"] != guardrails.KIND_MODERATION
    ]


def consolidation_plan(
    proposals: list[MemoryProposal], *, held: list[Held], kinds: list[str], rules: list | None = None
) -> Plan:
    """What `proposals` come to against `held` (see the module's docstring). `kinds` are the
    kinds kept (every one when empty); `rules` the agent's guardrail rules, as its snapshot pins
    them (only the input side's are applied)."""
    by_id = {memory.id: memory for memory in held}
    checked = proposals_checked(proposals, held=by_id, kinds=list(kinds) or list(MemoryKind.values))
    screening = input_rules(rules)
    plan = Plan()
    # What each memory says as the plan goes (the ones it adds under "new:<n>"), so that a later
    # proposal sees the earlier ones' effect.
    current = {memory.id: statement_key(memory.statement) for memory in held}
    keeps: dict[str, None] = {}
    updated: set[str] = set()

    def holder(key: str, *, besides: str | None = None) -> str | None:
        return next((other for other, said in current.items() if said == key and other != besides), None)

    def kept(memory_id: str) -> None:
        if not memory_id.startswith("new:") and memory_id not in updated:
            keeps[memory_id] = None

    for proposal, memory_id, kind, statement in checked:
        if proposal.action in ("add", "update"):
            statement, reason, detail = _screened(statement, screening)
            if reason:
                plan.refused.append(Refusal(proposal.action, kind, reason, detail))
                continue
        if proposal.action == "keep":
            kept(memory_id)
        elif proposal.action == "delete":
            del current[memory_id]
            keeps.pop(memory_id, None)
            plan.deletes.append((memory_id, ""))
        elif proposal.action == "update":
            key = statement_key(statement)
            other = holder(key, besides=memory_id)
            if other is not None:
                # The new statement is another memory's already: that one stays, this one goes.
                del current[memory_id]
                keeps.pop(memory_id, None)
                kept(other)
                plan.deletes.append((memory_id, f"same as {other}"))
            elif current[memory_id] == key and kind == by_id[memory_id].kind:
                kept(memory_id)
            else:
                current[memory_id] = key
                keeps.pop(memory_id, None)
                updated.add(memory_id)
                plan.updates.append((memory_id, kind, statement))
        else:  # add
            key = statement_key(statement)
            other = holder(key)
            if other is not None:
                kept(other)
            else:
                current[f"new:{len(plan.adds)}"] = key
                plan.adds.append((kind, statement))
    plan.keeps = list(keeps)
    return plan
