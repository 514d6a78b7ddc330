"""The fake server's prompt cache: cached tokens reported as each wire reports them.

Only requests that ask for caching are looked at, so every other request's usage stays as it
was: an Anthropic request with `cache_control` breakpoints, an OpenAI request with a
`prompt_cache_key` (OpenAI itself caches every long prompt; a test wants requests without
the key to keep their figures).

A prompt is a sequence of pieces, each counted by the script's `token_counting` and
`token_scale`: Anthropic's in its cache order (each tool, each system block, each content block
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
    def __init__(self):
        self._seen: OrderedDict[tuple, None] = OrderedDict()

    def _knows(self, key: tuple) -> bool:
        if key in self._seen:
            self._seen.move_to_end(key)
            return True
        return False

    def _remember(self, key: tuple) -> None:
        self._seen[key] = None
        self._seen.move_to_end(key)
        while len(self._seen) > CACHE_ENTRIES:
            self._seen.popitem(last=False)

    def clear(self) -> None:
        self._seen.clear()

    @staticmethod
    def _chain(pieces: list, count: Callable[[str], int]) -> tuple[list[str], list[int]]:
        """Each prefix's hash and tokens, the prefix of the first i + 1 pieces at i."""
        hashes, tokens, digest, total = [], [], hashlib.sha256(), 0
        for piece in pieces:
            text = _piece_text(piece)
            digest.update(text.encode())
            hashes.append(digest.copy().hexdigest())
            total += count(text)
            tokens.append(total)
        return hashes, tokens

    def anthropic(self, body: dict, reply: Reply, count: Callable[[str], int], minimum: int) -> Reply:
        pieces = anthropic_pieces(body)
        marks = [i for i, (_, closed) in enumerate(pieces) if closed]
        if not marks or reply.usage is None:
            return reply
        hashes, tokens = self._chain([_bare(piece) for piece, _ in pieces], count)
        model = body.get("model")
        read = 0
        for mark in reversed(marks):
            hit = next((i for i in range(mark, max(mark - LOOKBACK, -1), -1) if self._knows((model, hashes[i]))), None)
            if hit is not None:
                read = tokens[hit]
                break
        prompt = reply.usage.prompt_tokens
        read = min(read, prompt)
        cacheable = [mark for mark in marks if tokens[mark] >= minimum]
        written = max(min(tokens[cacheable[-1]], prompt) - read, 0) if cacheable else 0
        for mark in cacheable:
            self._remember((model, hashes[mark]))
        return replace(reply, usage=replace(reply.usage, cached_tokens=read, cache_write_tokens=written))

    def openai(self, body: dict, reply: Reply, count: Callable[[str], int], minimum: int, step: int) -> Reply:
        key = body.get("prompt_cache_key")
        if not isinstance(key, str) or not key or reply.usage is None:
            return reply
        hashes, tokens = self._chain(openai_pieces(body), count)
        scope = (body.get("model"), key)
        longest = max((tokens[i] for i in range(len(hashes)) if self._knows((*scope, hashes[i]))), default=0)
        longest = min(longest, reply.usage.prompt_tokens)
        cached = minimum + (longest - minimum) // step * step if longest >= minimum else 0
        for i, digest in enumerate(hashes):
            if tokens[i] >= minimum:
                self._remember((*scope, digest))
        return replace(reply, usage=replace(reply.usage, cached_tokens=cached))
