"""agentry_eval's table lines its numbers up under long and Chinese case names: names are
padded by the columns a terminal gives them (CJK characters take two)."""

import io
from types import SimpleNamespace

from evals.management.commands.agentry_eval import Command, display_width, pad


def test_display_width_counts_wide_characters_twice():
    assert display_width("abc") == 3
    assert display_width("天气-成都") == 9
    assert display_width("ｆｕｌｌ") == 8
    assert pad("天气", 6) == "天气  "


def _row(name, baseline, candidate):
    return SimpleNamespace(
        name=name, baseline=baseline, candidate=candidate, delta=candidate - baseline, regression=False
    )


def test_the_numbers_start_in_the_same_column_on_every_line():
    out = io.StringIO()
    command = Command(stdout=out)
    rows = [
        _row("who-are-you", 1.0, 1.0),
        _row("退货问题：收到的杯子是破损的怎么办", 1.0, 0.5),
        _row("a-case-name-much-longer-than-twenty-eight-columns", 0.0, 1.0),
    ]
    command._table("case pass rate", rows)
    lines = [line for line in out.getvalue().splitlines() if line]
    assert len(lines) == 4
    # The numbers are right-aligned after the padded name: one width on screen for every line
    # means every column lines up.
    assert len({display_width(line) for line in lines}) == 1, lines
