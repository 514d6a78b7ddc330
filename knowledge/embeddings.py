"""Embeddings from an OpenAI-compatible /embeddings endpoint, each request an LLMCall row.

The row (purpose "embedding") is written before the request and completed after it, with the
tokens the server reports and their cost at the model config's input price. Calls made while
indexing belong to no run (LLMCall.run is empty) and are linked to their base and document by
an EmbeddingCall row; calls made by a search belong to the run that searched, and so do those
of long-term memory (memory.services), which have no base. A run's embedding calls count on its
token and cost totals, like its other model calls, added in the transaction that completes them.
Timeouts are capped to AGENTRY_MODEL_CALL_MAX_SECONDS: a call still started after twice that
lost its worker, and the sweeper closes it (engine.sweeper).
"""

import math
import time
from decimal import Decimal

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import ModelConfig
from conversations.models import LLMCall, Run
from knowledge.models import Document, EmbeddingCall, KnowledgeBase
from platform_site import outbound

BATCH = 64


class EmbeddingFailed(Exception):
    pass


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


def cosine(a: list[float], b: list[float]) -> float:
    """Both vectors are stored normalised, so the dot product is the cosine."""
    return sum(x * y for x, y in zip(a, b, strict=False))


def _start(*, config: ModelConfig, body: dict, run: Run | None) -> LLMCall:
    iteration = 1
    if run is not None:
        last = LLMCall.objects.filter(run=run, purpose=LLMCall.Purpose.EMBEDDING).aggregate(n=Max("iteration"))["n"]
        iteration = (last or 0) + 1
    return LLMCall.objects.create(
        run=run,
        iteration=iteration,
        attempt=1,
        purpose=LLMCall.Purpose.EMBEDDING,
        model_config=config,
        provider=config.provider,
        model_name=config.model,
        request={"model": body["model"], "input_count": len(body["input"]), "input": body["input"]},
    )


def _request(config: ModelConfig, body: dict) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    cap = settings.AGENTRY_MODEL_CALL_MAX_SECONDS
    timeout = httpx.Timeout(
        min(config.read_timeout_seconds or 60, cap), connect=min(config.connect_timeout_seconds or 10, cap)
    )
    url = config.base_url.rstrip("/") + "/embeddings"
    try:
        response = outbound.get_client().post(url, json=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise EmbeddingFailed(
            _("The embedding endpoint %(url)s could not be reached: %(error)s") % {"url": url, "error": exc}
        ) from exc
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400 or not isinstance(data, dict):
        raise EmbeddingFailed(
            _("The embedding endpoint %(url)s answered HTTP %(status)s.") % {"url": url, "status": response.status_code}
        )
    return response.status_code, data


def _vectors(data: dict, count: int) -> list[list[float]]:
    items = data.get("data")
    if not isinstance(items, list) or len(items) != count:
        raise EmbeddingFailed(
            _("The embedding endpoint returned %(n)s vectors for %(count)s texts.")
            % {"n": len(items or []), "count": count}
        )
    ordered = sorted(items, key=lambda item: item.get("index", 0) if isinstance(item, dict) else 0)
    vectors = []
    for item in ordered:
        vector = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(vector, list) or not vector or not all(isinstance(x, int | float) for x in vector):
            raise EmbeddingFailed(_("The embedding endpoint returned something that is not a vector."))
        vectors.append(_normalised([float(x) for x in vector]))
    return vectors


def _run_totals_add(run: Run, call: LLMCall) -> None:
    # Increments, as the engine's own writes of the totals are: whichever commits first, both count.
    totals = {
        "prompt_tokens": F("prompt_tokens") + call.prompt_tokens,
        "total_tokens": F("total_tokens") + call.total_tokens,
    }
    totals["cost"] = F("cost") + call.cost
    if call.usage_estimated:
        totals["usage_estimated"] = True
    Run.objects.filter(pk=run.pk).update(**totals)


def embed(
    texts: list[str],
    *,
    config: ModelConfig,
    base: KnowledgeBase | None = None,
    run: Run | None = None,
    document: Document | None = None,
) -> list[list[float]]:
    """Normalised vectors of `texts`, one request (and one LLMCall row) per batch of 64. The
    rows belong to `run`, else to `base` (indexing): every call is someone's on the ledger."""
    if run is None and base is None:
        raise ValueError("an embedding call belongs to a run or to a knowledge base")
    vectors: list[list[float]] = []
    for start in range(0, len(texts), BATCH):
        body = {"model": config.model, "input": texts[start : start + BATCH]}
        call = _start(config=config, body=body, run=run)
        if run is None:
            EmbeddingCall.objects.create(llm_call=call, base=base, document=document)
        began = time.monotonic()
        try:
            status, data = _request(config, body)
            batch = _vectors(data, len(body["input"]))
        except EmbeddingFailed as exc:
            call.status, call.error = LLMCall.Status.FAILED, str(exc)
            call.latency_ms, call.finished_at = int((time.monotonic() - began) * 1000), timezone.now()
            call.save(update_fields=["status", "error", "latency_ms", "finished_at"])
            raise
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = usage.get("prompt_tokens")
        estimated = not isinstance(tokens, int)
        if estimated:
            tokens = sum(len(text) for text in body["input"]) // 4 + 1
        call.status, call.http_status = LLMCall.Status.SUCCEEDED, status
        call.prompt_tokens = call.total_tokens = tokens
        call.usage_estimated = estimated
        call.cost = Decimal(tokens) * Decimal(config.price_input_per_million or 0) / Decimal(1_000_000)
        call.response = {"vectors": len(batch), "dimensions": len(batch[0]), "usage": usage}
        call.latency_ms, call.finished_at = int((time.monotonic() - began) * 1000), timezone.now()
        with transaction.atomic():
            call.save()
            if run is not None:
                _run_totals_add(run, call)
        vectors.extend(batch)
    return vectors
