"""Validation of script steps (replies, branches, faults), collecting problems."""

from __future__ import annotations

import re

FAULT_KINDS = ("timeout", "malformed_json", "cut_stream")
CONDITIONS = ("if_last_tool_result_matches", "if_any_tool_result_matches", "if_last_tool_name")
REPLY_KEYS = {"content", "tool_calls", "usage", "latency_ms", "hold", "fault", "finish_reason"}
USAGE_KEYS = {"prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"}
FAULT_KEYS = {"status", "kind", "retry_after", "times", "timeout_ms"}
# A generic step draws its content and tool calls per request; the rest is as in a reply step.
GENERIC_KEYS = {"generic", "usage", "latency_ms", "hold", "fault"}
GENERIC_OPTIONS = {"call": ("each", "one"), "optional": ("some", "all", "none")}
# A memory extraction step answers with the changes fakellm.memory's rules give.
EXTRACT_MEMORY_KEYS = {"extract_memory", "usage", "latency_ms", "hold", "fault"}


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_amount(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


HOLD_LABEL = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
HOLD_LABEL_RULE = "a hold label is 1-100 letters, digits, '.', '_' or '-'"


class Problems:
    """Collects every problem so a script author sees them all at once."""

    def __init__(self):
        self.errors: list[str] = []

    def fail(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def is_object(self, value, path: str) -> bool:
        if not isinstance(value, dict):
            self.fail(path, "must be an object")
        return isinstance(value, dict)

    def keys(self, value: dict, allowed, path: str) -> None:
        for key in sorted(set(value) - set(allowed)):
            self.fail(path, f"unknown key {key!r}")

    def amounts(self, value: dict, keys, path: str) -> None:
        for key in keys:
            if key in value and not is_amount(value[key]):
                self.fail(f"{path}.{key}", "must be a non-negative number")

    def hold(self, value: dict, path: str) -> None:
        if "hold" in value and not (isinstance(value["hold"], str) and HOLD_LABEL.match(value["hold"])):
            self.fail(f"{path}.hold", HOLD_LABEL_RULE)

    def regex(self, pattern, path: str) -> None:
        if not isinstance(pattern, str):
            return self.fail(path, "must be a regex string")
        try:
            re.compile(pattern)
        except re.error as exc:
            self.fail(path, f"invalid regex: {exc}")


def check_step(value, path: str, problems: Problems) -> None:
    if not problems.is_object(value, path):
        return
    if "branches" in value:
        return check_branch(value, path, problems)
    if "generic" in value:
        return check_generic(value, path, problems)
    if "extract_memory" in value:
        return check_extract_memory(value, path, problems)
    problems.keys(value, REPLY_KEYS, path)
    problems.amounts(value, ["latency_ms"], path)
    problems.hold(value, path)
    if not isinstance(value.get("content", ""), str):
        problems.fail(f"{path}.content", "must be a string")
    if value.get("usage") is not None:
        check_usage(value["usage"], f"{path}.usage", problems)
    if "fault" in value:
        check_fault(value["fault"], f"{path}.fault", problems)
    if not isinstance(value.get("finish_reason", ""), str):
        problems.fail(f"{path}.finish_reason", "must be a string")
    calls = value.get("tool_calls", [])
    if not isinstance(calls, list):
        return problems.fail(f"{path}.tool_calls", "must be a list")
    for i, call in enumerate(calls):
        check_tool_call(call, f"{path}.tool_calls[{i}]", problems)


def check_generic(value: dict, path: str, problems: Problems) -> None:
    problems.keys(value, GENERIC_KEYS, path)
    problems.amounts(value, ["latency_ms"], path)
    problems.hold(value, path)
    if value.get("usage") is not None:
        check_usage(value["usage"], f"{path}.usage", problems)
    if "fault" in value:
        check_fault(value["fault"], f"{path}.fault", problems)
    options = value["generic"]
    if not problems.is_object(options, f"{path}.generic"):
        return
    problems.keys(options, {*GENERIC_OPTIONS, "seed"}, f"{path}.generic")
    for key, allowed in GENERIC_OPTIONS.items():
        if key in options and options[key] not in allowed:
            problems.fail(f"{path}.generic.{key}", f"must be one of {allowed}")
    if "seed" in options and not is_int(options["seed"]):
        problems.fail(f"{path}.generic.seed", "must be an integer")


def check_extract_memory(value: dict, path: str, problems: Problems) -> None:
    problems.keys(value, EXTRACT_MEMORY_KEYS, path)
    problems.amounts(value, ["latency_ms"], path)
    problems.hold(value, path)
    if value["extract_memory"] is not True:
        problems.fail(f"{path}.extract_memory", "must be true")
    if value.get("usage") is not None:
        check_usage(value["usage"], f"{path}.usage", problems)
    if "fault" in value:
        check_fault(value["fault"], f"{path}.fault", problems)


def check_tool_call(value, path: str, problems: Problems) -> None:
    if not problems.is_object(value, path):
        return
    problems.keys(value, {"name", "arguments", "id"}, path)
    if not isinstance(value.get("name"), str) or not value.get("name"):
        problems.fail(f"{path}.name", "must be a non-empty string")
    if not isinstance(value.get("arguments", {}), (dict, str)):
        problems.fail(f"{path}.arguments", "must be an object or a raw string")
    if not isinstance(value.get("id", ""), str):
        problems.fail(f"{path}.id", "must be a string")


def check_usage(value, path: str, problems: Problems) -> None:
    if not isinstance(value, dict):
        return problems.fail(path, "must be an object or null")
    problems.keys(value, USAGE_KEYS, path)
    for key, number in value.items():
        if key in USAGE_KEYS and not (is_int(number) and number >= 0):
            problems.fail(f"{path}.{key}", "must be a non-negative integer")


def check_fault(value, path: str, problems: Problems) -> None:
    if not problems.is_object(value, path):
        return
    problems.keys(value, FAULT_KEYS, path)
    problems.amounts(value, ["retry_after", "timeout_ms"], path)
    if ("status" in value) == ("kind" in value):
        problems.fail(path, "needs exactly one of 'status' or 'kind'")
    if "status" in value and not (is_int(value["status"]) and 400 <= value["status"] <= 599):
        problems.fail(f"{path}.status", "must be an HTTP error status (400-599)")
    if "kind" in value and value["kind"] not in FAULT_KINDS:
        problems.fail(f"{path}.kind", f"must be one of {FAULT_KINDS}")
    if "times" in value and not (is_int(value["times"]) and value["times"] >= 1):
        problems.fail(f"{path}.times", "must be a positive integer")


def check_branch(value: dict, path: str, problems: Problems) -> None:
    problems.keys(value, {"branches", "else"}, path)
    branches = value["branches"]
    if not isinstance(branches, list) or not branches:
        problems.fail(f"{path}.branches", "must be a non-empty list")
        branches = []
    for i, branch in enumerate(branches):
        where = f"{path}.branches[{i}]"
        if not problems.is_object(branch, where):
            continue
        problems.keys(branch, {"then", *CONDITIONS}, where)
        conditions = [c for c in CONDITIONS if c in branch]
        if len(conditions) != 1:
            problems.fail(where, f"needs exactly one condition of {CONDITIONS}")
        elif conditions[0] != "if_last_tool_name":
            problems.regex(branch[conditions[0]], f"{where}.{conditions[0]}")
        elif not isinstance(branch["if_last_tool_name"], str):
            problems.fail(f"{where}.if_last_tool_name", "must be a string")
        if "then" not in branch:
            problems.fail(where, "missing 'then'")
        else:
            check_step(branch["then"], f"{where}.then", problems)
    if "else" not in value:
        problems.fail(path, "missing 'else'")
    else:
        check_step(value["else"], f"{path}.else", problems)
