"""Which request parameters each provider kind accepts, checked when an operator saves a model.

A parameter a provider lacks is refused with a sentence saying so, rather than sent and
silently ignored (or rejected by the provider on the first run). The adapters map what is
accepted; see `build_request` in each.
"""

ANTHROPIC = "anthropic"
OPENAI_COMPATIBLE = "openai_compatible"
ANTHROPIC_MIN_THINKING_BUDGET = 1024

_ANTHROPIC_LACKS = {
    "frequency_penalty": "Anthropic Messages has no frequency penalty; leave it empty.",
    "presence_penalty": "Anthropic Messages has no presence penalty; leave it empty.",
    "seed": "Anthropic Messages has no seed; leave it empty.",
    "reasoning_effort": "Anthropic Messages has no reasoning effort; use thinking with a budget instead.",
}


def _common_problems(params: dict) -> dict[str, str]:
    problems = {}
    stop = params.get("stop") or []
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        problems["stop"] = 'Stop sequences are a list of non-empty strings, e.g. ["END"].'
    fmt, schema = params.get("response_format") or "text", params.get("response_schema")
    if fmt == "json_schema" and not isinstance(schema, dict):
        problems["response_schema"] = "Give the JSON Schema answers must match (an object)."
    elif fmt != "json_schema" and schema:
        problems["response_schema"] = "A schema is only used with the response format 'JSON matching a schema'."
    if params.get("thinking_budget_tokens") and params.get("thinking") != "enabled":
        problems["thinking_budget_tokens"] = "A thinking budget is only used when thinking is enabled."
    return problems


def _anthropic_problems(params: dict) -> dict[str, str]:
    problems = {name: message for name, message in _ANTHROPIC_LACKS.items() if params.get(name) not in (None, "")}
    if (params.get("response_format") or "text") != "text":
        problems["response_format"] = (
            "Anthropic Messages has no response format option; describe the format in the system prompt "
            "and choose 'text'."
        )
    temperature = params.get("temperature")
    if temperature is not None and temperature > 1:
        problems["temperature"] = "Anthropic accepts a temperature from 0 to 1."
    thinking = params.get("thinking") or ""
    if thinking == "auto":
        problems["thinking"] = "Anthropic thinking is either enabled (with a budget) or disabled, not auto."
    if thinking == "enabled":
        budget, max_tokens = params.get("thinking_budget_tokens"), params.get("max_tokens")
        if not budget or budget < ANTHROPIC_MIN_THINKING_BUDGET:
            problems["thinking_budget_tokens"] = (
                f"Anthropic extended thinking needs a budget of at least {ANTHROPIC_MIN_THINKING_BUDGET} tokens."
            )
        elif not max_tokens or max_tokens <= budget:
            problems["max_tokens"] = "With extended thinking, max tokens must be set above the thinking budget."
        if temperature is not None:
            problems["temperature"] = "Anthropic extended thinking runs at the default temperature; leave it empty."
        top_p = params.get("top_p")
        if top_p is not None and top_p < 0.95:
            problems["top_p"] = "With Anthropic extended thinking, top p must be between 0.95 and 1 (or empty)."
    return problems


def _openai_problems(params: dict) -> dict[str, str]:
    problems = {}
    if params.get("thinking_budget_tokens"):
        problems["thinking_budget_tokens"] = (
            "OpenAI-compatible endpoints take no standard thinking budget; put it in extra params in the form "
            'your endpoint documents (e.g. {"thinking_budget": 2048} for Qwen).'
        )
    return problems


def parameter_problems(*, provider: str, params: dict) -> dict[str, str]:
    """Field name → why the value cannot be used with this provider. Empty when all is well."""
    problems = _common_problems(params)
    if provider == ANTHROPIC:
        problems.update(_anthropic_problems(params))
    elif provider == OPENAI_COMPATIBLE:
        problems.update(_openai_problems(params))
    return problems


def agent_problems(*, tool_choice: str, models: list) -> dict[str, str]:
    """Agent settings that one of its model configs (main or fallback) cannot honour."""
    for model in models:
        if model.provider == ANTHROPIC and model.thinking == "enabled" and tool_choice in ("required", "tool"):
            return {
                "tool_choice": (
                    f"Model config {model.name} uses Anthropic extended thinking, which allows only tool choice "
                    "auto or none."
                )
            }
    return {}
