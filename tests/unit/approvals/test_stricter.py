"""The approval in force (tools.approval_policy.approval_stricter): the stricter of a version's
pinned approval and the tool's current one, always > rule > never; two rules both hold."""

import pytest

from tools.approval_policy import approval_need, approval_stricter

PARAMETERS = {"type": "object", "properties": {"amount": {"type": "number"}, "currency": {"type": "string"}}}


def _approval(policy: str, rule: str = "", timeout=None) -> dict:
    return {"policy": policy, "rule": rule, "timeout_seconds": timeout, "on_expiry": "continue"}


def _asks(approval: dict, **arguments) -> bool:
    return approval_need(spec={"approval": approval, "parameters": PARAMETERS}, arguments=arguments).required


@pytest.mark.parametrize(
    "pinned,current,expected",
    [
        ("never", "always", "always"),
        ("never", "rule", "rule"),
        ("rule", "always", "always"),
        ("always", "never", "always"),
        ("always", "rule", "always"),
        ("rule", "never", "rule"),
        ("never", "never", "never"),
    ],
)
def test_the_stricter_policy_is_in_force(pinned, current, expected):
    rule = "amount > 10"
    pinned_approval = _approval(pinned, rule if pinned == "rule" else "")
    current_approval = _approval(current, rule if current == "rule" else "")
    assert approval_stricter(pinned_approval, current_approval)["policy"] == expected


def test_the_stricter_one_is_taken_whole_with_its_timeout():
    tightened = approval_stricter(_approval("never", timeout=None), _approval("always", timeout=600))
    assert tightened == _approval("always", timeout=600)
    kept = approval_stricter(_approval("always", timeout=60), _approval("never", timeout=600))
    assert kept["timeout_seconds"] == 60


def test_no_current_approval_keeps_the_pinned_one():
    pinned = _approval("never")
    assert approval_stricter(pinned, None) is pinned


def test_two_rules_ask_when_either_asks():
    both = approval_stricter(_approval("rule", "amount > 1000"), _approval("rule", 'currency != "CNY"'))
    assert both["policy"] == "rule"
    assert _asks(both, amount=5000, currency="CNY")
    assert _asks(both, amount=5, currency="USD")
    assert not _asks(both, amount=5, currency="CNY")
    # The same rule is not doubled.
    same = _approval("rule", "amount > 1000")
    assert approval_stricter(same, _approval("rule", " amount > 1000 ")) is same


def test_a_rule_that_cannot_be_evaluated_still_asks_when_combined():
    both = approval_stricter(_approval("rule", "amount > 1000"), _approval("rule", "len(currency) > 3"))
    assert _asks(both, amount=5)  # currency missing: len(None) fails, so the call asks
