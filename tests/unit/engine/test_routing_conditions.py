"""Routing rules' conditions (engine.routing): pure functions of the run's user message and its
circumstances, and the decision they make in order."""

from datetime import UTC, datetime, time
from types import SimpleNamespace

import pytest

from engine import snapshots
from engine.routing import (
    Facts,
    attachments_match,
    classifier_key,
    decide,
    in_window,
    input_length,
    label_read,
    length_matches,
    routed_snapshot,
    rule_check,
)

MODEL = {"id": 7, "name": "big"}
CLASSIFIER_MODEL = {"id": 9, "name": "classifier"}


def _rule(condition: str, rule_id: int = 1, name: str = "", **settings) -> dict:
    return {"id": rule_id, "name": name, "condition": condition, "model": MODEL, **settings}


def _facts(text="hello", *, kinds=(), at=datetime(2026, 12, 7, 12, 0, tzinfo=UTC), tier=None, labels=None) -> Facts:
    return Facts(
        text=text, part_kinds=frozenset(kinds), posted_at=at, time_zone="Asia/Shanghai", tier=tier, labels=labels or {}
    )


def test_input_length_counts_characters_or_estimated_tokens():
    assert input_length("你好世界", "chars") == 4
    assert input_length("hello world " * 10, "chars") == 120
    # The estimate counts a CJK character as a token and a word as about a token.
    assert input_length("你好世界", "tokens") == 4
    assert 10 <= input_length("hello world " * 10, "tokens") < 120


@pytest.mark.parametrize(
    ("length", "over", "under", "matches"),
    [
        (101, 100, None, True),
        (100, 100, None, False),
        (99, None, 100, True),
        (100, None, 100, False),
        (50, 10, 100, True),
        (5, 10, 100, False),
    ],
)
def test_length_over_and_under_are_strict_bounds(length, over, under, matches):
    assert length_matches(length, over=over, under=under) is matches


def test_attachments_any_or_of_one_kind():
    assert attachments_match("any", frozenset({"file"}))
    assert not attachments_match("any", frozenset())
    assert attachments_match("image", frozenset({"image", "file"}))
    assert not attachments_match("audio", frozenset({"image"}))


def test_a_window_spans_midnight_when_it_ends_before_it_starts():
    day = {"start": time(9), "end": time(18)}
    assert in_window(time(9), **day) and in_window(time(17, 59), **day)
    assert not in_window(time(18), **day) and not in_window(time(8, 59), **day)
    night = {"start": time(22), "end": time(6)}
    assert in_window(time(23), **night) and in_window(time(5), **night)
    assert not in_window(time(12), **night)


def test_time_of_day_is_read_in_the_rules_zone_else_the_agents():
    rule = _rule("time_of_day", time_start="09:00:00", time_end="18:00:00", time_zone="")
    # 02:00 UTC is 10:00 in Shanghai (the agent's zone), 21:00 the day before in New York.
    at = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)
    assert rule_check(rule, _facts(at=at)).matched
    assert rule_check(rule, _facts(at=at)).saw == "10:00"
    assert not rule_check({**rule, "time_zone": "America/New_York"}, _facts(at=at)).matched


def test_tier_compares_without_case_and_an_absent_tier_matches_nothing():
    rule = _rule("tier", tiers=["gold", "platinum"])
    assert rule_check(rule, _facts(tier=" Gold ")).matched
    assert not rule_check(rule, _facts(tier="silver")).matched
    assert not rule_check(rule, _facts(tier="")).matched


def test_a_label_is_the_answers_first_line_trimmed_and_short():
    assert label_read('  "Code".\nbecause it asks for Python') == "code"
    assert label_read("数学。") == "数学"
    assert label_read("") == ""
    assert len(label_read("x" * 500)) == 64


def test_a_classifier_rule_matches_its_labels_only():
    rule = _rule(
        "classifier", classifier_model=CLASSIFIER_MODEL, classifier_prompt="Label it.", labels=["code", "math"]
    )
    key = classifier_key(rule)
    assert rule_check(rule, _facts(labels={key: "code"})).matched
    failed = rule_check(rule, _facts(labels={key: None}))
    assert not failed.matched and failed.error == "the classifier call failed"
    unknown = rule_check(rule, _facts(labels={key: "poetry"}))
    assert not unknown.matched and unknown.saw == "poetry" and unknown.error == "an unknown label"
    # Rules sharing the model and the prompt share the call; another prompt is another call.
    assert classifier_key({**rule, "labels": ["chat"]}) == key
    assert classifier_key({**rule, "classifier_prompt": "Other."}) != key


def test_the_first_matching_rule_wins_and_the_ones_before_are_recorded():
    rules = [
        _rule("attachments", 1, "pictures", attachment_kind="image"),
        _rule("input_length", 2, "long", length_unit="chars", length_over=10, length_under=None),
        _rule("input_length", 3, "longer", length_unit="chars", length_over=5, length_under=None),
    ]
    decision = decide(rules, _facts("a long question"))
    assert decision == {
        "rule": 2,
        "rule_id": 2,
        "name": "long",
        "condition": "input_length",
        "saw": 15,
        "model_config": {"id": 7, "name": "big"},
        "unmatched": [{"rule": 1, "condition": "attachments", "saw": []}],
    }
    none = decide(rules, _facts("short"))
    assert none["rule"] is None and [tried["rule"] for tried in none["unmatched"]] == [1, 2, 3]


def test_a_label_another_rule_lists_is_known():
    shared = {"classifier_model": CLASSIFIER_MODEL, "classifier_prompt": "Label it."}
    rules = [_rule("classifier", 1, labels=["code"], **shared), _rule("classifier", 2, labels=["math"], **shared)]
    decision = decide(rules, _facts(labels={classifier_key(rules[0]): "math"}))
    assert decision["rule"] == 2
    assert decision["unmatched"] == [{"rule": 1, "condition": "classifier", "saw": "math"}]


def test_the_routed_snapshot_holds_the_rules_model_and_keeps_the_fallback():
    fallback = {"id": 3, "name": "fallback"}
    snapshot = {"model": {"id": 1, "name": "default"}, "fallback_model": fallback, "routing": {"rules": [_rule("x")]}}
    routed = routed_snapshot(snapshot, {"rule": 1})
    assert routed["model"] == MODEL and routed["fallback_model"] == fallback
    assert routed_snapshot(snapshot, {"rule": None}) is snapshot
    # A decision naming a rule the version does not have (never written so) keeps the agent's model.
    assert routed_snapshot(snapshot, {"rule": 5}) is snapshot


def test_a_fork_that_asks_for_a_model_is_not_routed_away_from_it(monkeypatch):
    version = {"model": {"id": 1}, "fallback_model": {"id": 2}, "routing": {"rules": [_rule("x")]}}
    monkeypatch.setattr(snapshots, "version_snapshot", lambda version_id: version)
    asked = {"id": 9, "name": "asked"}
    fork = snapshots.run_snapshot(SimpleNamespace(agent_version_id=1, sandbox={"model": asked}))
    assert fork == {"model": asked, "fallback_model": None}
    assert snapshots.run_snapshot(SimpleNamespace(agent_version_id=1, sandbox=None)) is version
