"""A validated script, ready to pick the step that answers a conversation."""

from __future__ import annotations

import random
import re

from fakellm.conversation import Conversation
from fakellm.validation import DEFAULTS, FAULT_DEFAULTS, validate_script

DEFAULT_FALLBACK = {"content": "I have no scripted reply for that."}


def _branch_holds(branch: dict, conversation: Conversation) -> bool:
    if "if_last_tool_name" in branch:
        return conversation.tool_results != [] and (conversation.last_tool_name == branch["if_last_tool_name"])
    if "if_last_tool_result_matches" in branch:
        pattern = branch["if_last_tool_result_matches"]
        return bool(conversation.tool_results) and bool(re.search(pattern, conversation.last_tool_result))
    pattern = branch["if_any_tool_result_matches"]
    return any(re.search(pattern, text) for _, text in conversation.tool_results)


def resolve(step: dict, conversation: Conversation) -> dict:
    """Follow branches (possibly nested) down to a reply step."""
    while "branches" in step:
        chosen = next((b for b in step["branches"] if _branch_holds(b, conversation)), None)
        step = chosen["then"] if chosen else step["else"]
    return step


class Script:
    def __init__(self, document: dict):
        validate_script(document)
        self.document = document
        self.defaults = {**DEFAULTS, **document.get("defaults", {})}
        self.faults = {**FAULT_DEFAULTS, **document.get("faults", {})}
        self.scenarios = [(re.compile(s["match"]), s["steps"]) for s in document.get("scenarios", [])]
        self.fallback = document.get("fallback", DEFAULT_FALLBACK)
        self._chaos = random.Random(self.faults["seed"])
        self._rates = [(k, p) for k, p in self.faults["rate"].items() if p > 0]

    def pick(self, conversation: Conversation) -> tuple[dict, dict]:
        """Return the reply step and the named groups of the matching scenario."""
        for pattern, steps in self.scenarios:
            found = pattern.search(conversation.last_user_text)
            if found:
                step = steps[min(conversation.step_index, len(steps) - 1)]
                return resolve(step, conversation), found.groupdict()
        return resolve(self.fallback, conversation), {}

    def draw_chaos(self) -> dict | None:
        """A random fault (as a step-style FAULT) per faults.rate, or None."""
        if not self._rates:
            return None
        roll = self._chaos.random()
        for key, probability in self._rates:
            if roll < probability:
                return self._chaos_fault(key)
            roll -= probability
        return None

    def _chaos_fault(self, key: str) -> dict:
        if not key.isdigit():
            return {"kind": key}
        fault = {"status": int(key)}
        if fault["status"] in (429, 503):
            fault["retry_after"] = self.faults["retry_after"]
        return fault
