"""Approval policy: defaults by side effect, per-agent overrides, and rules on the arguments."""

import pytest
from django.core.exceptions import ValidationError

from tools.approval_policy import approval_need, evaluate_rule, validate_rule

PAYMENT = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "currency": {"type": "string"}, "lines": {"type": "array"}},
}


def _spec(policy: str, rule: str = "") -> dict:
    return {"name": "pay", "parameters": PAYMENT, "approval": {"policy": policy, "rule": rule}}


@pytest.mark.parametrize(
    "rule,arguments,required",
    [
        ("amount > 1000", {"amount": 1500}, True),
        ("amount > 1000", {"amount": 20}, False),
        ('currency != "CNY" or amount >= 500', {"amount": 10, "currency": "USD"}, True),
        ("currency is None", {"amount": 10}, True),  # a declared argument that is absent is None
        ("len(lines) > 2", {"lines": [1, 2, 3]}, True),
        ('args.get("amount", 0) > 5', {}, False),
        ("sum([l for l in lines]) > 10", {"lines": [5, 6]}, True),  # unknown function: fail closed
        ("amount > 1000", {"currency": "CNY"}, True),  # None > 1000 cannot be evaluated: fail closed
        ("amount.__class__", {"amount": 1}, True),  # refused by the evaluator: fail closed
    ],
)
def test_rule_decides_and_fails_closed(rule, arguments, required):
    assert approval_need(spec=_spec("rule", rule), arguments=arguments).required is required


def test_rule_reasons_are_shown_to_the_approver():
    assert approval_need(spec=_spec("rule", "amount > 1"), arguments={"amount": 2}).why == "rule `amount > 1` matched"
    assert "could not be evaluated" in approval_need(spec=_spec("rule", "amount > 1"), arguments={}).why
    assert approval_need(spec=_spec("always"), arguments={}).required
    assert not approval_need(spec=_spec("never"), arguments={"amount": 10**9}).required


def test_comprehension_variables_are_allowed_in_rules():
    validate_rule("len([x for x in lines if x > 100]) > 0", PAYMENT)
    assert evaluate_rule("len([x for x in lines if x > 100]) > 0", arguments={"lines": [5, 500]}, parameters=PAYMENT)


@pytest.mark.parametrize(
    "rule,message",
    [
        ("", "A rule is needed"),
        ("amount >", "not a valid expression"),
        ("amout > 5", r"unknown name\(s\) amout\. Arguments of this tool: amount, currency, lines"),
        ("import os", "not a valid expression"),
        ("amount > 1; currency", "not a valid expression"),
    ],
)
def test_bad_rules_are_refused_when_saved(rule, message):
    with pytest.raises(ValidationError, match=message):
        validate_rule(rule, PAYMENT)
