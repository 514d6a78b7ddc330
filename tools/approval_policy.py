"""When a tool call needs a person's approval: never, always, or when a rule on its arguments says so.

Rules are single expressions written in the admin, such as `amount > 1000` or
`currency != "CNY" or amount >= 500`. They are evaluated by simpleeval (never Python's eval):
each top-level argument is a name (a declared but missing one is None), `args` is the whole
argument object, and only a few harmless functions exist. A rule that cannot be evaluated for
some call (a missing value, a wrong type) asks for approval: doubt never runs a write.
"""

import ast
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
