"""A deterministic OpenAI-compatible `/v1/embeddings`: hashed character n-gram vectors.

Each text becomes a bag of features (Chinese: single characters and bigrams; other words: the
lower-cased word and its character trigrams), each hashed (SHA-1, so stable across processes)
into one of DIMENSIONS buckets with a sign, weighted 1 + log(count), and normalised. Texts that
share characters and word pieces are near, which is what tests of vector search need; it knows
nothing of meaning, so paraphrases with no shared pieces stay far apart.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter

DIMENSIONS = 256
_TOKENS = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+|[^\W_]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _features(text: str) -> Counter:
    features: Counter = Counter()
    for token in _TOKENS.findall(text.lower()):
        if _CJK.match(token):
            features.update(token)
            features.update(token[i : i + 2] for i in range(len(token) - 1))
        else:
            features[f"w:{token}"] += 1
            padded = f"#{token}#"
            features.update(f"t:{padded[i : i + 3]}" for i in range(len(padded) - 2))
    return features


def embed(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for feature, count in _features(text).items():
        digest = hashlib.sha1(feature.encode()).digest()
        bucket = int.from_bytes(digest[:4], "big") % DIMENSIONS
        vector[bucket] += (1.0 if digest[4] & 1 else -1.0) * (1.0 + math.log(count))
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [round(x / norm, 6) for x in vector]


def embeddings_response(body: dict) -> tuple[int, dict]:
    """(status, JSON body) for an embeddings request: `input` a string or a list of strings."""
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        return 400, {
            "error": {
                "message": "input must be a string or a non-empty list of strings",
                "type": "invalid_request_error",
            }
        }
    tokens = sum(math.ceil(len(t) / 4) for t in texts)
    return 200, {
        "object": "list",
        "model": body.get("model", ""),
        "data": [{"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
