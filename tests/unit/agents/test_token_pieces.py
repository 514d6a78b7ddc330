"""The token estimate walks a text's pieces once per message on every step; these pin that
counting a CJK run as one piece (and the integer arithmetic) gives exactly what the rule in
agents/providers/base.py says: one match per CJK character, ceil of each piece's share."""

import math
import random
import re

import pytest

from agents.providers.base import _CJK, estimate_tokens

# The rule as first written: one match per CJK character, each kind's cost as a fraction rounded up.
_ONE_BY_ONE = re.compile(
    rf"(?P<cjk>[{_CJK}])|(?P<word>[^\W\d_{_CJK}]+)|(?P<digits>\d+)|(?P<mark>[^\w\s{_CJK}]+)|(?P<line>\s*\n\s*)"
)
_COSTS = {
    "cjk": lambda n: n,
    "word": lambda n: math.ceil(n / 6),
    "digits": lambda n: math.ceil(n / 3),
    "mark": lambda n: math.ceil(n * 2 / 3),
    "line": lambda n: 1,
}


def by_the_rule(text: str) -> int:
    return sum(_COSTS[m.lastgroup](m.end() - m.start()) for m in _ONE_BY_ONE.finditer(text))


# Every kind of piece and the characters at the kinds' borders: the ideographic space (CJK and
# white space), full-width digits and letters (CJK and \d or \w), the underscore (counted by no kind).
ALPHABET = list('ab Zé 19_,.!?{}"\n\t\r') + ["\u3000", "中", "文", "，", "。", "１", "ｆ", "가", "カ"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "第12个问题：明天成都天气如何？",
        '{"data":[{"wind_dir_day":"东北风","temp_high":18,"predict_date":"2026-03-01"}]}',
        "Hello world, 1234567 numbers.\n  And a new line_with_underscore.",
        "\u3000\n 全角１２３ｆｕｌｌ  \u3000\n x",
    ],
)
def test_examples_count_as_the_rule_says(text):
    assert estimate_tokens(text) == by_the_rule(text)


def test_random_texts_count_as_the_rule_says():
    chosen = random.Random(43)
    for _ in range(5000):
        text = "".join(chosen.choice(ALPHABET) for _ in range(chosen.randint(0, 60)))
        assert estimate_tokens(text) == by_the_rule(text), repr(text)


def test_a_json_value_is_counted_as_its_text():
    value = {"城市": "成都", "days": [1, 2, 3]}
    assert estimate_tokens(value) == by_the_rule('{"城市": "成都", "days": [1, 2, 3]}')
