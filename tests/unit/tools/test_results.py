"""Each tool trims its own result to its limit and says what it left out (seed 003 §5.2)."""

import json

from tools.results import render


def test_short_results_are_compact_json_or_text():
    assert render({"a": 1, "b": [1, 2]}, 100).text == '{"a":1,"b":[1,2]}'
    assert render("plain text", 100).text == "plain text"
    assert not render("plain text", 100).truncated


def test_lists_lose_whole_rows_and_say_how_many():
    rows = [{"id": i, "name": f"row {i}"} for i in range(50)]
    rendered = render(rows, 300)
    head, note = rendered.text.rsplit("\n", 1)
    kept = json.loads(head)
    assert rendered.truncated and kept == rows[: len(kept)] and 0 < len(kept) < 50
    assert note == f"… {50 - len(kept)} more rows (showing {len(kept)} of 50)"
    assert len(head) <= 300


def test_the_largest_list_inside_an_object_is_trimmed():
    value = {"total": 40, "items": [{"id": i, "text": "x" * 20} for i in range(40)], "tags": ["a"]}
    rendered = render(value, 400)
    head, note = rendered.text.rsplit("\n", 1)
    kept = json.loads(head)
    assert kept["total"] == 40 and kept["tags"] == ["a"]
    assert note.startswith(f"… {40 - len(kept['items'])} more rows")


def test_text_loses_characters_and_says_how_many():
    rendered = render("x" * 1000, 100)
    assert rendered.truncated
    assert rendered.text == "x" * 100 + "\n… [900 more characters omitted]"
