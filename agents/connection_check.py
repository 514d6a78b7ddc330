"""Test connection for a model config: one tiny chat request made exactly as a run makes it
(same adapter, same outbound seam, same parameters and key), and the list of models the server
offers, each with what came back or exactly what went wrong.

Nothing is written to the ledger. What is returned may be shown to the operator: the key never
is, and should a server echo it in an error, it is masked there too.
"""

import logging
import time
from dataclasses import dataclass, field

import httpx

from agents.models import ModelConfig, ProviderKind
from agents.providers import ProviderError, get_provider
from agents.providers.anthropic import API_VERSION
from agents.snapshot import _model_snapshot
from platform_site import outbound
from platform_site.crypto import mask

log = logging.getLogger(__name__)

# An operator waits for the page: a model that needs longer than this to say "OK" fails the test.
CHAT_TIMEOUT_SECONDS = 30.0
# The check run when a config's connection is saved: the operator's save waits for it.
SAVE_CHECK_TIMEOUT_SECONDS = 10.0
LIST_TIMEOUT_SECONDS = 10.0
# Small enough to cost nothing, large enough for a model that starts with a few tokens of preamble.
ANSWER_TOKENS = 16
ANSWER_CHARS = 500
MAX_MODELS = 200
# "JSON" is in the prompt because OpenAI refuses JSON mode unless the messages mention it.
PROMPT = "Connection test. Reply with the single word OK (as JSON if you must answer in JSON)."


@dataclass
class ConnectionReport:
    url: str
    model: str
    ok: bool = False
    answer: str = ""
    finish_reason: str = ""
    latency_ms: int | None = None
    http_status: int | None = None
    total_tokens: int | None = None
    error: str = ""
    models_url: str = ""
    models: list[str] = field(default_factory=list)
    models_total: int = 0
    models_error: str = ""

    @property
    def model_listed(self) -> bool | None:
        """Whether the server lists the configured model (None when it lists none)."""
        return self.model in self.models if self.models else None


def _tiny(model: dict) -> dict:
    """The config as a run uses it, with the answer capped where that cannot change the request's
    validity: extended thinking needs a budget below max_tokens, and OpenAI's newer models
    refuse a max_tokens the config did not ask for."""
    if model.get("thinking") == "enabled":
        return model
    if model["provider"] == ProviderKind.ANTHROPIC or model.get("max_tokens"):
        return {**model, "max_tokens": min(model.get("max_tokens") or ANSWER_TOKENS, ANSWER_TOKENS)}
    return model


def _chat(report: ConnectionReport, model: dict, api_key: str, timeout: float = CHAT_TIMEOUT_SECONDS) -> None:
    provider = get_provider(model["provider"])
    body = provider.build_request(
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        tools=[],
        tool_choice="auto",
        parallel_tool_calls=True,
    )
    started = time.monotonic()
    try:
        response = provider.send(model=model, api_key=api_key, body=body, timeout_cap=timeout)
    except ProviderError as exc:
        report.error, report.http_status = exc.message, exc.http_status
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        report.error = f"The request to {report.url} could not be sent: {exc}"
    else:
        report.ok = True
        report.answer = response.content[:ANSWER_CHARS]
        report.finish_reason = response.finish_reason
        report.http_status = response.http_status
        report.total_tokens = response.usage.total_tokens
    report.latency_ms = int((time.monotonic() - started) * 1000)


def _model_ids(data) -> tuple[list[str], int] | None:
    # OpenAI, Anthropic, vLLM, llama.cpp and Ollama all answer {"data": [{"id": …}, …]}.
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    ids = sorted({str(item["id"]) for item in items if isinstance(item, dict) and item.get("id")})
    return ids[:MAX_MODELS], len(ids)


def _list_models(report: ConnectionReport, model: dict, api_key: str) -> None:
    url = report.models_url
    if model["provider"] == ProviderKind.ANTHROPIC:
        headers = {"anthropic-version": API_VERSION, **({"x-api-key": api_key} if api_key else {})}
    else:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    timeout = outbound.timeout(LIST_TIMEOUT_SECONDS, connect=model.get("connect_timeout_seconds") or 10)
    try:
        response = outbound.get_client().get(url, headers=headers, timeout=timeout)
    except httpx.TimeoutException:
        report.models_error = f"Listing models at {url} timed out."
        return
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        report.models_error = f"Could not list models at {url}: {exc or type(exc).__name__}."
        return
    if response.status_code >= 400:
        report.models_error = f"HTTP {response.status_code} from {url}: {response.text[:300] or response.reason_phrase}"
        return
    try:
        listed = _model_ids(response.json())
    except ValueError:
        listed = None
    if listed is None:
        report.models_error = f"{url} answered, but not with a model list."
        return
    report.models, report.models_total = listed


def _scrubbed(text: str, api_key: str) -> str:
    return text.replace(api_key, mask(api_key)) if api_key and text else text


def model_config_test(
    *, config: ModelConfig, list_models: bool = True, chat_timeout: float = CHAT_TIMEOUT_SECONDS
) -> ConnectionReport:
    """One tiny chat request to the config's server as the engine would send it, then (with
    `list_models`) its models list. The check on save asks the chat alone, capped shorter: the
    operator waits for it."""
    model = _tiny(_model_snapshot(config))
    api_key = config.api_key or ""
    base = model["base_url"].rstrip("/")
    path = "/messages" if model["provider"] == ProviderKind.ANTHROPIC else "/chat/completions"
    report = ConnectionReport(url=base + path, model=model["model"], models_url=base + "/models")
    try:
        _chat(report, model, api_key, chat_timeout)
    except ProviderError as exc:  # an unknown provider kind: nothing was sent
        report.error = exc.message
    if not list_models:
        report.models_error = "Not asked."
    elif report.ok or report.http_status:
        _list_models(report, model, api_key)
    else:
        # Unreachable for the chat request: asking the same server again only doubles the wait.
        report.models_error = "Not asked: the chat request got no answer from this server."
    report.error = _scrubbed(report.error, api_key)
    report.models_error = _scrubbed(report.models_error, api_key)
    report.answer = _scrubbed(report.answer, api_key)
    log.info(
        "connection test of model config %s: %s",
        config.name,
        f"answered in {report.latency_ms} ms" if report.ok else report.error,
    )
    return report
