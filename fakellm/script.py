"""A validated script, ready to pick the step that answers a conversation."""

from __future__ import annotations

import random
import re

from fakellm.conversation import Conversation
from fakellm.memory import is_extraction, recalled
from fakellm.validation import DEFAULTS, FAULT_DEFAULTS, validate_script

DEFAULT_FALLBACK = {"content": "I have no scripted reply for that."}


def _branch_match(branch: dict, conversation: Conversation) -> dict | None:
    """The named groups of the branch's regex (empty for a name condition) when it holds."""
    if "if_last_tool_name" in branch:
        holds = conversation.tool_results != [] and conversation.last_tool_name == branch["if_last_tool_name"]
        return {} if holds else None
    if "if_last_tool_result_matches" in branch:
        texts = [conversation.last_tool_result] if conversation.tool_results else []
        pattern = branch["if_last_tool_result_matches"]
    else:
        texts = [result.text for result in conversation.tool_results]
        pattern = branch["if_any_tool_result_matches"]
    for text in texts:
        found = re.search(pattern, text)
        if found:
            return {k: v or "" for k, v in found.groupdict().items()}
    return None


def resolve(step: dict, conversation: Conversation) -> tuple[dict, dict]:
    """Follow branches (possibly nested) down to a reply step; also the named groups of the
    regexes that chose it, which its templates may use."""
    groups: dict[str, str] = {}
    while "branches" in step:
        for branch in step["branches"]:
            found = _branch_match(branch, conversation)
            if found is not None:
                groups.update(found)
                step = branch["then"]
                break
        else:
            step = step["else"]
    return step, groups


def misunderstood(needs: dict, conversation: Conversation) -> bool:
    """Whether an offered tool the scenario needs has a description lacking one of the words that
    say what it is for: a model reading it would not see that this tool answers the question.
    A tool that is not offered at all is left to the scenario (the engine reports the call)."""
    offered = {tool.name: tool.description.casefold() for tool in conversation.tools}
    return any(
        name in offered and not all(word.casefold() in offered[name] for word in words) for name, words in needs.items()
    )


class Script:
    def __init__(self, document: dict):
        validate_script(document)
        self.document = document
        self.defaults = {**DEFAULTS, **document.get("defaults", {})}
        self.faults = {**FAULT_DEFAULTS, **document.get("faults", {})}
        self.scenarios = [
            (
                re.compile(s["match"]),
                s["steps"],
                s.get("needs_description", {}),
                s.get("not_understood"),
                re.compile(s["recall"]) if "recall" in s else None,
            )
            for s in document.get("scenarios", [])
        ]
        self.fallback = document.get("fallback", DEFAULT_FALLBACK)
        self.memory_extraction = document.get("memory_extraction")
        self._chaos = random.Random(self.faults["seed"])
        self._rates = [(k, p) for k, p in self.faults["rate"].items() if p > 0]

    def pick(self, conversation: Conversation) -> tuple[dict, dict]:
        """Return the reply step and the named groups of the matching scenario. A memory
        extraction is answered by `memory_extraction` before any scenario: its user message quotes
        the whole conversation, which the scenarios would otherwise match. A scenario with a
        `recall` regex matches only when a memory the request was shown matches it too."""
        if self.memory_extraction is not None and is_extraction(conversation):
            return resolve(self.memory_extraction, conversation)
        for pattern, steps, needs, not_understood, recall in self.scenarios:
            found = pattern.search(conversation.last_user_text)
            if not found:
                continue
            groups = found.groupdict()
            if recall is not None:
                remembered = recalled(recall, conversation)
                if remembered is None:
                    continue
                groups = {**remembered, **{k: v for k, v in groups.items() if v is not None}}
            if needs and misunderstood(needs, conversation):
                step, chosen_by = resolve(not_understood, conversation)
                return step, {**groups, **chosen_by}
            step, chosen_by = resolve(steps[min(conversation.step_index, len(steps) - 1)], conversation)
            return step, {**groups, **chosen_by}
        return resolve(self.fallback, conversation)

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
