"""A model's context window: how much of the history fits, and how long the answer may be.

The window holds the prompt and the answer together. History is sized to leave the answer its
room (the model's max tokens, else a quarter of the window); each request's max tokens is then
capped to what its estimated prompt leaves, so a request never asks for more than fits.
"""

from agents.providers.base import estimate_prompt_tokens
from agents.snapshot import AgentSnapshot, snapshot_models


def tool_definitions(tools: list[dict]) -> list[dict]:
    """Tools as they are sent: the snapshot also holds policy and executor settings."""
    return [{"name": t["name"], "description": t["description"], "parameters": t["parameters"]} for t in tools]


def _answer_room(model: dict) -> int:
    return model.get("max_tokens") or model["context_window"] // 4


def history_budget(snapshot: AgentSnapshot) -> int | None:
    """Tokens the prompt may use on every configured model with a known window."""
    rooms = [m["context_window"] - _answer_room(m) for m in snapshot_models(snapshot) if m.get("context_window")]
    return max(min(rooms), 1) if rooms else None


def fitted(model: dict, *, messages: list[dict], tools: list[dict]) -> dict:
    """The model's settings for one request, max tokens capped to the room the prompt leaves."""
    window = model.get("context_window")
    if not window:
        return model
    prompt = estimate_prompt_tokens(messages=messages, tools=tool_definitions(tools), provider=model.get("provider"))
    room = max(window - prompt, 1)
    wanted = model.get("max_tokens")
    return {**model, "max_tokens": room if wanted is None else min(wanted, room)}
