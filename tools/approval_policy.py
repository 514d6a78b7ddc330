"""When a tool call needs a person's approval: never, always, or when a rule on its arguments says so.

Rules are single expressions written in the admin, such as `amount > 1000` or
`currency != "CNY" or amount >= 500`. They are evaluated by simpleeval (never Python's eval):
each top-level argument is a name (a declared but missing one is None), `args` is the whole
argument object, and only a few harmless functions exist. A rule that cannot be evaluated for
some call (a missing value, a wrong type) asks for approval: doubt never runs a write.
"""

import ast
from collections.abc import Callable
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _
from simpleeval import EvalWithCompoundTypes, NameNotDefined


class ApprovalPolicy(models.TextChoices):
    AUTO = "auto", _("by side effect (write tools: always, read tools: never)")
    NEVER = "never", _("never")
    ALWAYS = "always", _("always")
    RULE = "rule", _("when the rule matches")


class ApprovalExpiry(models.TextChoices):
    CONTINUE = "continue", _("tell the model the call was not run, and continue")
    END_RUN = "end_run", _("end the run (approval_expired)")


RULE_FUNCTIONS = {
    "len": len,
    "abs": abs,
    "min": min,
    "max": max,
    "int": int,
    "float": float,
    "str": str,
    "round": round,
    "sorted": sorted,
}


@dataclass(frozen=True)
class ApprovalNeed:
    required: bool
    why: str


def _bound_names(tree: ast.AST) -> set[str]:
    """Names introduced inside the expression itself (comprehension variables)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            bound |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return bound


def validate_rule(rule: str, parameters: dict | None) -> None:
    """Refuse, at save time, a rule that does not parse or names something the tool does not take."""
    if not rule.strip():
        raise ValidationError("A rule is needed when the policy is 'when the rule matches'.")
    try:
        tree = ast.parse(rule.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValidationError(
            f"The rule is not a valid expression ({exc.msg}); write one expression, such as: amount > 1000"
        ) from exc
    properties = set((parameters or {}).get("properties") or {})
    known = properties | {"args"} | set(RULE_FUNCTIONS) | _bound_names(tree)
    unknown = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - known)
    if unknown:
        raise ValidationError(
            f"The rule uses unknown name(s) {', '.join(unknown)}. Arguments of this tool: "
            f"{', '.join(sorted(properties)) or 'none'}; also available: args, {', '.join(RULE_FUNCTIONS)}."
        )


def evaluate_rule(rule: str, *, arguments: dict, parameters: dict | None) -> bool:
    """True when the rule matches these arguments. Raises on an expression it cannot evaluate."""
    declared = set((parameters or {}).get("properties") or {})

    def name(node):
        if node.id == "args":
            return arguments
        if node.id in arguments:
            return arguments[node.id]
        if node.id in declared:
            return None
        raise NameNotDefined(node.id, rule)

    return bool(EvalWithCompoundTypes(functions=dict(RULE_FUNCTIONS), names=name).eval(rule))


def effective_policy(
    *, tool_policy: str, tool_rule: str, side_effect: str, override: str = "inherit", override_rule: str = ""
) -> tuple[str, str]:
    """(policy, rule) after resolving the tool's default and an agent's override."""
    if override and override != "inherit":
        return override, override_rule if override == ApprovalPolicy.RULE else ""
    if tool_policy == ApprovalPolicy.AUTO:
        return (ApprovalPolicy.ALWAYS if side_effect == "write" else ApprovalPolicy.NEVER), ""
    return tool_policy, tool_rule if tool_policy == ApprovalPolicy.RULE else ""


# How strict a resolved policy is: "always" asks for every call, a rule for some, "never" for none.
STRICTNESS = {ApprovalPolicy.NEVER: 0, ApprovalPolicy.RULE: 1, ApprovalPolicy.ALWAYS: 2}


def approval_stricter(pinned: dict, current: dict | None) -> dict:
    """The approval in force for a call: the stricter of the one its agent version pinned and the
    one its tool (with the agent's override) has now, so tightening a policy applies at once to
    every live version, while loosening one waits for a release that pins it.

    Both are resolved approvals (a ToolSpec's "approval": policy never, rule or always, its rule,
    timeout and expiry), `current` None when the tool has none now (a delegate). always > rule >
    never; the stricter one is taken whole, with its timeout and expiry. Two different rules
    both hold: a call asks if either rule asks, `(pinned) or (current)` (a rule that fails to
    evaluate asks, see approval_need, so neither can hide the other)."""
    if current is None:
        return pinned
    have, now = STRICTNESS.get(pinned["policy"], 2), STRICTNESS.get(current["policy"], 2)
    if now > have:
        return current
    if now < have or pinned["policy"] != ApprovalPolicy.RULE:
        return pinned
    rules = [rule.strip() for rule in (pinned["rule"], current["rule"])]
    if rules[0] == rules[1]:
        return pinned
    return {**pinned, "rule": f"({rules[0]}) or ({rules[1]})"}


@dataclass(frozen=True)
class LiveApproval:
    """How one version live traffic runs (published, a canary's candidate, or the draft of an
    agent never published) applies a tool's approval: `pinned` by the version, `current` the
    tool's (with the agent's override) now, `effective` the stricter, which calls get."""

    agent: str
    role: str  # "published", "canary" or "draft"
    number: int | None  # the version's number; None for a draft
    pinned: dict
    current: dict | None
    effective: dict


# The live versions' approvals of a tool, for its admin page: versions are the agents app's,
# above this one, so it plugs its reader in at start-up (agents.apps).
LiveApprovals = Callable[..., list[LiveApproval]]
_live_approvals: list[LiveApprovals] = []


def live_approvals_register(reader: LiveApprovals) -> None:
    if reader not in _live_approvals:
        _live_approvals.append(reader)


def live_approvals(*, tool) -> list[LiveApproval] | None:
    """Each live version's approval of `tool`; None when no reader is plugged in."""
    if not _live_approvals:
        return None
    return [found for reader in _live_approvals for found in reader(tool=tool)]


def approval_need(*, spec: dict, arguments: dict) -> ApprovalNeed:
    """Whether this call (a tool snapshot and its validated arguments) must wait for a person."""
    policy = spec["approval"]["policy"]
    if policy == ApprovalPolicy.NEVER:
        return ApprovalNeed(False, "policy: never")
    if policy == ApprovalPolicy.RULE:
        rule = spec["approval"]["rule"]
        try:
            matched = evaluate_rule(rule, arguments=arguments, parameters=spec.get("parameters"))
        except Exception as exc:  # any failure of a rule is a reason to ask, never to run
            return ApprovalNeed(
                True, f"rule `{rule}` could not be evaluated ({type(exc).__name__}: {exc}); asking to be safe"
            )
        return ApprovalNeed(matched, f"rule `{rule}` {'matched' if matched else 'did not match'}")
    return ApprovalNeed(True, "policy: always")
