"""The fake server's prompt cache: cached tokens reported as each wire reports them.

Only requests that ask for caching are looked at, so every other request's usage stays as it
was: an Anthropic request with `cache_control` breakpoints, an OpenAI request with a
`prompt_cache_key` (OpenAI itself caches every long prompt; a test wants requests without
the key to keep their figures).

A prompt is a sequence of pieces, each counted by the script's `token_counting` and
`token_scale` (a prefix's tokens are its share of the prompt's, by its pieces' counts):
Anthropic's in its cache order (each tool, each system block, each content block
of each message), OpenAI's the tools, then each message. A prefix is known by a hash chained
over its pieces (a breakpoint's `cache_control` left out, as moving a breakpoint does not change
the text). The server remembers prefixes per model (OpenAI: and key), the newest
`CACHE_ENTRIES`, for the process's life; none shorter than `cache_min_tokens` (1024 by
default, as both providers) is cached.

- Anthropic: a request writes the prefix closing each of its breakpoints; it reads the longest
  remembered prefix ending at a breakpoint or up to 20 pieces before one (the provider's look
  back). Reported: `cache_read_input_tokens` (read), `cache_creation_input_tokens` (up to its
  last breakpoint, less what was read) and `input_tokens` the rest.
- OpenAI: a request writes every prefix ending at a message; it reads the longest remembered
  one, rounded down to `cache_min_tokens` plus a multiple of `cache_step_tokens` (128 by
  default, as OpenAI), in `prompt_tokens_details.cached_tokens`.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from fakellm.reply import Reply

CACHE_ENTRIES = 20_000
LOOKBACK = 20


def _bare(piece):
    """A piece without its breakpoint: moving a breakpoint does not change the text."""
    return {k: v for k, v in piece.items() if k != "cache_control"} if isinstance(piece, dict) else piece


def _piece_text(piece) -> str:
    return json.dumps(piece, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _blocks(content) -> list:
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def without_breakpoints(body: dict) -> dict:
    """An Anthropic request as it reads without its breakpoints, for counting its tokens: a
    breakpoint is no text, so the same prompt counts the same with caching on or off (a content
    or system of one text block counts as its string)."""

    def plain(blocks):
        if not isinstance(blocks, list) or not any(isinstance(b, dict) and "cache_control" in b for b in blocks):
            return blocks
        blocks = [_bare(block) for block in blocks]
        if len(blocks) == 1 and isinstance(blocks[0], dict) and set(blocks[0]) == {"type", "text"}:
            return blocks[0]["text"]
        return blocks

    bare = {**body, "tools": [_bare(tool) for tool in body["tools"]]} if body.get("tools") else dict(body)
    if body.get("system"):
        system = plain(body["system"])
        bare["system"] = system if isinstance(system, str) else "".join(b.get("text", "") for b in system)
    bare["messages"] = [
        {**m, "content": plain(m.get("content"))} if isinstance(m, dict) else m for m in body.get("messages") or []
    ]
    return bare


def has_breakpoints(body: dict) -> bool:
    return any(closed for _, closed in anthropic_pieces(body))


def anthropic_pieces(body: dict) -> list[tuple[object, bool]]:
    """(piece, whether a breakpoint closes it), in Anthropic's cache order."""
    pieces = [(tool, isinstance(tool, dict) and "cache_control" in tool) for tool in body.get("tools") or []]
    if body.get("system"):
        pieces += [(block, isinstance(block, dict) and "cache_control" in block) for block in _blocks(body["system"])]
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            for block in _blocks(message.get("content") or ""):
                pieces.append(
                    (
                        {"role": message.get("role"), "block": _bare(block)},
                        isinstance(block, dict) and "cache_control" in block,
                    )
                )
    return pieces


def openai_pieces(body: dict) -> list[object]:
    return ([body["tools"]] if body.get("tools") else []) + list(body.get("messages") or [])


class PromptCache:
    """Remembered prefixes, each with its tokens when it was written (what a read reports)."""

    def __init__(self):
        self._seen: OrderedDict[tuple, int] = OrderedDict()

    def _held(self, key: tuple) -> int | None:
        if key in self._seen:
            self._seen.move_to_end(key)
            return self._seen[key]
        return None

    def _remember(self, key: tuple, tokens: int) -> None:
        self._seen.setdefault(key, tokens)
        self._seen.move_to_end(key)
        while len(self._seen) > CACHE_ENTRIES:
            self._seen.popitem(last=False)

    def clear(self) -> None:
        self._seen.clear()

    @staticmethod
    def _chain(pieces: list, count: Callable[[str], int], prompt: int) -> tuple[list[str], list[int]]:
        """Each prefix's hash and tokens, the prefix of the first i + 1 pieces at i: its share of
        the prompt's tokens by the pieces' counts, so the whole is the prompt as reported."""
        hashes, counts, digest, total = [], [], hashlib.sha256(), 0
        for piece in pieces:
            text = _piece_text(piece)
            digest.update(text.encode())
            hashes.append(digest.copy().hexdigest())
            total += count(text)
            counts.append(total)
        return hashes, [prompt * counted // total if total else 0 for counted in counts]

    def anthropic(self, body: dict, reply: Reply, count: Callable[[str], int], minimum: int) -> Reply:
        pieces = anthropic_pieces(body)
        marks = [i for i, (_, closed) in enumerate(pieces) if closed]
        if not marks or reply.usage is None:
            return reply
        prompt = reply.usage.prompt_tokens
        hashes, tokens = self._chain([_bare(piece) for piece, _ in pieces], count, prompt)
        model = body.get("model")
        read = 0
        for mark in reversed(marks):
            held = (self._held((model, hashes[i])) for i in range(mark, max(mark - LOOKBACK, -1), -1))
            read = next((n for n in held if n is not None), 0)
            if read:
                break
        read = min(read, reply.usage.prompt_tokens)
        cacheable = [mark for mark in marks if tokens[mark] >= minimum]
        written = max(tokens[cacheable[-1]] - read, 0) if cacheable else 0
        for mark in cacheable:
            self._remember((model, hashes[mark]), tokens[mark])
        return replace(reply, usage=replace(reply.usage, cached_tokens=read, cache_write_tokens=written))

    def openai(self, body: dict, reply: Reply, count: Callable[[str], int], minimum: int, step: int) -> Reply:
        key = body.get("prompt_cache_key")
        if not isinstance(key, str) or not key or reply.usage is None:
            return reply
        hashes, tokens = self._chain(openai_pieces(body), count, reply.usage.prompt_tokens)
        scope = (body.get("model"), key)
        held = (self._held((*scope, digest)) for digest in hashes)
        longest = min(max((n for n in held if n is not None), default=0), reply.usage.prompt_tokens)
        cached = minimum + (longest - minimum) // step * step if longest >= minimum else 0
        for i, digest in enumerate(hashes):
            if tokens[i] >= minimum:
                self._remember((*scope, digest), tokens[i])
        return replace(reply, usage=replace(reply.usage, cached_tokens=cached))
