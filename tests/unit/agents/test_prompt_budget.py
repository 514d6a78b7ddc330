"""A prompt template's render has a budget of work: a loop of millions of items, a filter that
pads to a huge width and a loop that repeats a large value all stop at once with an error naming
the limit; an ordinary template renders as before."""

import pytest
from django.template import TemplateSyntaxError

from agents.prompt_budget import MAX_STEPS, MAX_TEXT_CHARS, PromptBudgetExceeded
from agents.prompting import prompt_text_render

# 2,500 x 2,500 items: 6.25 million loop iterations with an empty body.
NESTED_LOOPS = (
    '{% with s="abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvw"|ljust:"2500" %}\n'
    "{% for a in s %}{% for b in s %}\n"
    "{% endfor %}{% endfor %}\n"
    "{% endwith %}"
)


def _refused(template: str, variables: dict | None = None) -> str:
    with pytest.raises(PromptBudgetExceeded) as error:
        prompt_text_render(template, variables or {})
    return str(error.value)


def test_nested_loops_stop_at_the_step_limit():
    assert f"{MAX_STEPS} steps" in _refused(NESTED_LOOPS)


@pytest.mark.parametrize(
    "template",
    [
        '{{ "a"|ljust:"2000000000" }}',
        '{{ "a"|center:"2000000000" }}',
        '{{ 1|stringformat:"02000000000d" }}',
        '{{ 1|floatformat:"2000000000" }}',
        '{{ items|join:"------------------------------------------------" }}',
    ],
)
def test_a_filter_that_would_make_a_huge_string_is_refused_before_it_runs(template):
    assert f"{MAX_TEXT_CHARS} characters" in _refused(template, {"items": list(range(100_000))})


def test_a_loop_repeating_a_large_value_stops_at_the_text_limit():
    variables = {"payload": {"items": list(range(1000)), "big": "b" * 100_000}}
    message = _refused("{% for i in payload.items %}{{ payload.big }}{% endfor %}", variables)
    assert f"{MAX_TEXT_CHARS} characters" in message


@pytest.mark.parametrize("tag", ["{% lorem 999999999 w %}", "{% debug %}"])
def test_the_lorem_and_debug_tags_are_not_available(tag):
    with pytest.raises(TemplateSyntaxError, match="not available in prompt templates"):
        prompt_text_render(tag, {})


def test_an_ordinary_template_renders_as_before():
    template = (
        "Order {{ payload.id }} for {{ payload.name|upper }}:\n"
        "{% for item in payload.items %}{{ forloop.counter }}. {{ item.title|default:'-' }}"
        "{% if not forloop.last %}, {% endif %}{% endfor %} & more"
    )
    payload = {"id": 7, "name": "ann", "items": [{"title": "tea"}, {"title": ""}]}
    assert prompt_text_render(template, {"payload": payload}) == "Order 7 for ANN:\n1. tea, 2. - & more"


def test_the_budget_is_per_render_not_per_template():
    template = "{% for i in items %}{{ i }}{% endfor %}"
    items = list(range(MAX_STEPS // 3))
    for _ in range(5):
        assert len(prompt_text_render(template, {"items": items})) > 0
