"""The demo's route tool gives its duration as a person reads it, and the demo model's answer
uses that text rather than seconds ("约 1 小时 33 分钟", never "约 5575 秒")."""

import json

import pytest

from demo.service import human_duration, plan_route


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(20, "不到 1 分钟"), (1470, "25 分钟"), (3600, "1 小时"), (5575, "1 小时 33 分钟"), (7199, "2 小时")],
)
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text


def test_the_route_carries_seconds_and_the_text():
    route = plan_route("bicycle", "成都南站", "成都动物园")
    assert route["duration_text"] == human_duration(route["duration_s"])


def test_the_demo_script_answers_with_the_text():
    from pathlib import Path

    script = (Path(__file__).resolve().parents[2] / "fakellm" / "scripts" / "demo.json").read_text(encoding="utf-8")
    json.loads(script)
    assert "{tool:duration_text}" in script and "{tool:duration_s} 秒" not in script
