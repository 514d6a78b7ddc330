"""The OpenAPI description of the two endpoints that are async Django views rather than DRF
views (drf-spectacular only sees DRF): the run event stream and the chat completions API."""

from conversations.events import EventType

ERROR = {"$ref": "#/components/schemas/Error"}

RUN_EVENT = {
    "type": "object",
    "description": "One SSE event: `id:` is `seq`, `event:` is `type`, `data:` is this object as JSON.",
    "properties": {
        "run": {"type": "string", "format": "uuid"},
        "seq": {"type": "integer", "minimum": 1},
        "type": {"type": "string", "enum": list(EventType.values), "example": EventType.LLM_CALL_COMPLETED.value},
        "payload": {"type": "object", "additionalProperties": True},
        "created_at": {"type": "string", "format": "date-time"},
    },
    "required": ["run", "seq", "type", "payload", "created_at"],
}


def _sse_event(description: str, *, data: str, **fields) -> dict:
    """A Server-Sent Event as an SSE parser hands it over: OpenAPI 3.0 has no way to name the
    schema of the JSON inside `data`, so the description does."""
    return {
        "type": "object",
        "description": description,
        "properties": {**fields, "data": {"type": "string", "description": data}},
        "required": ["data"],
    }


RUN_EVENT_MESSAGE = _sse_event(
    "One event of the stream: `id` is the event's `seq`, `event` its `type`.",
    data="The event as JSON: a RunEvent (see components/schemas/RunEvent).",
    id={"type": "string", "pattern": "^[0-9]+$"},
    event={"type": "string"},
)

CHAT_COMPLETION_CHUNK_MESSAGE = _sse_event(
    "One chunk of a streamed completion.",
    data='A `chat.completion.chunk` object as JSON, an `{"error": …}` object, or `[DONE]` at the end.',
)

CHAT_MESSAGE = {
    "type": "object",
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant"]},
        "content": {
            "oneOf": [
                {"type": "string"},
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}},
                        "required": ["type", "text"],
                    },
                },
            ]
        },
    },
    "required": ["role", "content"],
}

USAGE = {
    "type": "object",
    "properties": {
        "prompt_tokens": {"type": "integer"},
        "completion_tokens": {"type": "integer"},
        "total_tokens": {"type": "integer"},
        "prompt_tokens_details": {"type": "object", "properties": {"cached_tokens": {"type": "integer"}}},
        "completion_tokens_details": {"type": "object", "properties": {"reasoning_tokens": {"type": "integer"}}},
    },
}

CHAT_REQUEST = {
    "type": "object",
    "description": "System and developer messages are joined into one system message that follows the "
    "agent's own system prompt; sampling parameters are ignored (the agent's model settings apply).",
    "properties": {
        "model": {"type": "string", "description": "An agent slug."},
        "messages": {"type": "array", "items": CHAT_MESSAGE, "minItems": 1},
        "stream": {"type": "boolean", "default": False},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "user": {
            "type": "string",
            "maxLength": 200,
            "description": "Your id for the end user: the conversation's end user (limits per end user, memory).",
        },
    },
    "required": ["model", "messages"],
}

CHAT_COMPLETION = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string", "enum": ["chat.completion"]},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer"},
                    "message": {
                        "type": "object",
                        "properties": {
                            "role": {"type": "string", "enum": ["assistant"]},
                            "content": {"type": "string"},
                        },
                    },
                    "finish_reason": {"type": "string", "enum": ["stop", "length", "content_filter"]},
                },
            },
        },
        "usage": USAGE,
        "agentry": {
            "type": "object",
            "description": "The run behind the answer.",
            "properties": {
                "run_id": {"type": "string", "format": "uuid"},
                "conversation_id": {"type": "string", "format": "uuid"},
                "status": {"type": "string"},
                "stop_reason": {"type": "string"},
            },
        },
    },
}

OPENAI_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
        }
    },
}


def _json(schema: dict, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def add_streaming_endpoints(result, generator, request, public):
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault(
        "Error",
        {
            "type": "object",
            "properties": {"message": {"type": "string"}, "extra": {"type": "object"}},
            "required": ["message", "extra"],
        },
    )
    schemas.update(
        {
            "RunEvent": RUN_EVENT,
            "ChatCompletionRequest": CHAT_REQUEST,
            "ChatCompletion": CHAT_COMPLETION,
            "OpenAIError": OPENAI_ERROR,
        }
    )
    security = [{"bearerAuth": []}]
    result["paths"]["/api/v1/runs/{run_id}/events/"] = {
        "get": {
            "operationId": "runs_events",
            "tags": ["runs"],
            "summary": "Stream the run's events (Server-Sent Events)",
            "description": "Events in order of `seq`, from after `Last-Event-ID`; keepalive comments while idle; "
            "the stream ends after the run's terminal event.",
            "security": [*security, {"cookieAuth": []}],
            "parameters": [
                {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}},
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 0},
                },
                {
                    "name": "last_event_id",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 0},
                    "description": "The same as the header, for clients that cannot set it.",
                },
            ],
            "responses": {
                "200": {
                    "description": "text/event-stream of RunEvent",
                    "content": {"text/event-stream": {"schema": RUN_EVENT_MESSAGE}},
                },
                "204": {"description": "The run has ended and every event was already read."},
                "400": _json(ERROR, "Malformed Last-Event-ID."),
                "401": _json(ERROR, "Not authenticated."),
                "404": _json(ERROR, "No such run among yours."),
                "429": _json(ERROR, "Throttled."),
            },
        }
    }
    result["paths"]["/api/v1/runs/export/"] = {
        "get": {
            "operationId": "runs_export",
            "tags": ["runs"],
            "summary": "Export runs with their model calls, tool invocations, approvals and events",
            "description": "The runs the caller may see, oldest first, streamed. JSONL: one run per line with its "
            "rows nested (llm_calls, tool_invocations, approvals, events). CSV: one row per ledger row with a "
            "`kind` column and the rest of the row as JSON in `detail`.",
            "security": [*security, {"cookieAuth": []}],
            "parameters": [
                {"name": "format", "in": "query", "schema": {"type": "string", "enum": ["jsonl", "csv"]}},
                {"name": "agent", "in": "query", "schema": {"type": "string"}, "description": "An agent's slug."},
                {
                    "name": "since",
                    "in": "query",
                    "schema": {"type": "string"},
                    "description": "Runs created at or after this ISO 8601 date or date-time.",
                },
                {
                    "name": "until",
                    "in": "query",
                    "schema": {"type": "string"},
                    "description": "Runs created before this ISO 8601 date or date-time.",
                },
            ],
            "responses": {
                "200": {
                    "description": "The export, as an attachment.",
                    "content": {
                        "application/x-ndjson": {"schema": {"type": "string"}},
                        "text/csv": {"schema": {"type": "string"}},
                    },
                },
                "400": _json(ERROR, "A bad format, date or agent, named in extra.fields."),
                "401": _json(ERROR, "Not authenticated."),
                "429": _json(ERROR, "Throttled."),
            },
        }
    }
    result["paths"]["/v1/chat/completions"] = {
        "post": {
            "operationId": "chat_completions",
            "tags": ["openai"],
            "summary": "OpenAI-compatible chat completion answered by an agent",
            "description": "`model` is an agent slug. The agent's tools run inside the run; if the run parks for "
            "approval, the reply says so and names the run. With `stream: true` the answer comes as "
            "`chat.completion.chunk` events ending with `data: [DONE]`.",
            "security": security,
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/ChatCompletionRequest"},
                        "example": {
                            "model": "customer-service",
                            "messages": [{"role": "user", "content": "我在成都，明天天气如何？"}],
                            "stream": False,
                        },
                    }
                },
            },
            "responses": {
                "200": {
                    "description": "The completion, or with stream=true a text/event-stream of chunks.",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
                        "text/event-stream": {"schema": CHAT_COMPLETION_CHUNK_MESSAGE},
                    },
                },
                **{
                    code: _json({"$ref": "#/components/schemas/OpenAIError"}, text)
                    for code, text in [
                        ("400", "Bad input, naming the parameter."),
                        ("401", "Not authenticated."),
                        ("404", "No such agent among those the caller may use."),
                        ("413", "Body too large."),
                        ("429", "Throttled."),
                        ("502", "The run failed or was cancelled."),
                        ("504", "The run did not end within the wait."),
                    ]
                },
            },
        }
    }
    result["paths"]["/v1/models"] = {
        "get": {
            "operationId": "models_list",
            "tags": ["openai"],
            "summary": "The agents the caller may use, as OpenAI models",
            "description": "For OpenAI SDKs and tools that list models first: each agent you may use, its slug as "
            "the model `id` to send to /v1/chat/completions.",
            "security": security,
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "properties": {
                            "object": {"type": "string", "enum": ["list"]},
                            "data": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "id": {"type": "string"},
                                        "object": {"type": "string"},
                                        "created": {"type": "integer"},
                                        "owned_by": {"type": "string"},
                                    },
                                },
                            },
                        },
                    },
                    "Agent slugs as model ids.",
                ),
                "401": _json({"$ref": "#/components/schemas/OpenAIError"}, "Not authenticated."),
            },
        }
    }
    return result
