"""A scenario's needs_description: an offered tool whose description lacks the words the
scenario needs is not understood, and the fake model answers without calling it."""

from __future__ import annotations

import pytest

from fakellm.conversation import Conversation, OfferedTool
from fakellm.script import Script
from fakellm.validation import ScriptError


def test_words_are_matched_case_insensitively():
    script = Script(
        {
            "scenarios": [
                {
                    "match": "q",
                    "needs_description": {"t": ["Weather"]},
                    "not_understood": {"content": "no"},
                    "steps": [{"content": "", "tool_calls": [{"name": "t"}]}],
                }
            ]
        }
    )
    understood = Conversation(last_user_text="q", tools=[OfferedTool("t", "the WEATHER of a city", {})])
    vague = Conversation(last_user_text="q", tools=[OfferedTool("t", "data", {})])
    assert script.pick(understood)[0]["tool_calls"] == [{"name": "t"}]
    assert script.pick(vague)[0] == {"content": "no"}


@pytest.mark.parametrize(
    "scenario, problem",
    [
        ({"needs_description": {"t": ["w"]}}, "needs a 'not_understood' step"),
        ({"needs_description": {"t": []}, "not_understood": {"content": "x"}}, "non-empty lists of words"),
        ({"needs_description": {"t": [""]}, "not_understood": {"content": "x"}}, "non-empty lists of words"),
        ({"needs_description": {"t": ["w"]}, "not_understood": {"bogus": 1}}, "not_understood"),
    ],
)
def test_malformed_needs_are_refused(scenario, problem):
    with pytest.raises(ScriptError, match=problem):
        Script({"scenarios": [{"match": "q", "steps": [{"content": "a"}], **scenario}]})
