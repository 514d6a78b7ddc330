"""Cases as JSON Lines: one case per line, the EvalCase fields by name (suite left out)."""

import json

from evals.models import EvalCase
from platform_site.json_input import JSONInputError, json_loads_checked
from tools.arguments import contains_nul

CASE_FIELDS = (
    "name",
    "position",
    "turns",
    "expected_tool_calls",
    "forbidden_tools",
    "expect_no_tool",
    "answer_contains",
    "answer_pattern",
    "answer_schema",
    "answer_rubric",
    "answer_equals",
    "max_model_turns",
    "max_tokens",
    "tool_results",
    "recorded_calls",
    "live_reads",
    "prior_conversations",
    "remembered",
    "forgotten",
)


class CaseLineInvalid(ValueError):
    pass


def case_to_line(case: EvalCase) -> str:
    return json.dumps({name: getattr(case, name) for name in CASE_FIELDS}, ensure_ascii=False)


def case_from_line(line: str, *, number: int) -> dict:
    """A line's fields; what is wrong with their values the model's validation says.

    A line is parsed as the API parses a body (platform_site.json_input: bounded nesting, no
    lone surrogates, finite numbers) and refused with NUL anywhere, as the API refuses it: what
    the API answers with a 400 is a bad line here, never an error while saving."""
    try:
        data = json_loads_checked(line)
    except JSONInputError as exc:
        raise CaseLineInvalid(f"line {number}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        raise CaseLineInvalid(f'line {number}: a case is an object with a "name"')
    unknown = set(data) - set(CASE_FIELDS)
    if unknown:
        raise CaseLineInvalid(f"line {number}: unknown fields {', '.join(sorted(unknown))}")
    if contains_nul(data):
        raise CaseLineInvalid(f"line {number}: the NUL character (U+0000) cannot be stored")
    return data
