"""Turn a reply step into a format-neutral Reply the wire renderers serialise."""

from __future__ import annotations

import json
from dataclasses import dataclass

from fakellm.templates import TemplateContext, render, render_value


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    audio_tokens: int | None = None  # None: a request without parts, whose usage never names them
    cache_write_tokens: int = 0  # of prompt_tokens, written to the prompt cache (fakellm.prompt_cache)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # exactly what OpenAI clients receive, possibly malformed
    input: dict  # what Anthropic clients receive (must be an object)
    given_id: str | None = None


@dataclass(frozen=True)
class Reply:
    content: str
    tool_calls: list[ToolCall]
    usage: Usage | None
    finish_reason: str | None = None  # script override, else derived per format


def _tool_call(spec: dict, ctx: TemplateContext) -> ToolCall:
    arguments = spec.get("arguments", {})
    if isinstance(arguments, str):
        # Raw strings are sent verbatim so scripts can produce malformed JSON.
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):  # malformed, or nested deeper than a decoder goes
            parsed = {}
        return ToolCall(spec["name"], arguments, parsed if isinstance(parsed, dict) else {}, spec.get("id"))
    rendered = render_value(arguments, ctx)
    text = json.dumps(rendered, ensure_ascii=False, separators=(",", ":"))
    return ToolCall(spec["name"], text, rendered, spec.get("id"))


def _usage(
    step: dict, content: str, calls: list[ToolCall], count_prompt, count_text, audio_tokens: int | None
) -> Usage | None:
    if "usage" in step and step["usage"] is None:
        return None
    given = step.get("usage") or {}
    prompt = given.get("prompt_tokens")
    if prompt is None:
        prompt = count_prompt()
    completion = given.get("completion_tokens")
    if completion is None:
        completion = count_text(content + "".join(c.arguments for c in calls))
    return Usage(prompt, completion, given.get("cached_tokens", 0), given.get("reasoning_tokens", 0), audio_tokens)


def build_reply(step: dict, ctx: TemplateContext, count_prompt, count_text, audio_tokens: int | None = None) -> Reply:
    """count_prompt is a callable so the prompt is only measured when needed; count_text
    counts the tokens of the reply's text (fakellm.tokens); audio_tokens is the prompt's share
    spent on audio, when the request has parts."""
    content = render(step.get("content", ""), ctx)
    calls = [_tool_call(spec, ctx) for spec in step.get("tool_calls", [])]
    usage = _usage(step, content, calls, count_prompt, count_text, audio_tokens)
    return Reply(content, calls, usage, step.get("finish_reason"))
