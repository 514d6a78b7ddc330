"""Answers in a schema (docs/quality.md): the check of an operator's output schema, and the
reading of a model's answer against it.

An agent (or one /v1 request) may declare a JSON Schema its final answer must match. The answer
is read as JSON (a ```json fenced block around it is forgiven, models add one unasked) and
validated here, on the platform's side, whatever the provider promised: a model that keeps to a
schema (ModelConfig.structured_output) is asked with it too, but its answer is checked all the
same. The answer came from a model, so it is untrusted input: it is parsed with the bounds of
any JSON from outside (depth, non-finite numbers) and validated in linear time
(tools.schemas.LinearValidator), and what goes wrong is a sentence the model can fix.
"""

from dataclasses import dataclass, field

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from platform_site.json_input import JSONInputError, json_loads_checked
from platform_site.text import scrub_nul
from tools.schemas import LinearValidator

# The errors told to the model and kept on the event: the first few say enough to fix an answer.
MAX_ERRORS = 5
# Each error names the failing value: a model's long answer is cut in the message.
MAX_ERROR_CHARS = 300


class OutputSchemaInvalid(ValueError):
    """An output schema that is not a usable JSON Schema."""


def output_schema_check(schema) -> None:
    """Refuse what is not a JSON Schema object (OutputSchemaInvalid, with what is wrong)."""
    if not isinstance(schema, dict):
        raise OutputSchemaInvalid("An output schema must be a JSON object (a JSON Schema).")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.path) or "(root)"
        raise OutputSchemaInvalid(f"Not a valid JSON Schema at {path}: {exc.message}") from exc
    except RecursionError:
        raise OutputSchemaInvalid("The JSON Schema is nested too deeply.") from None


@dataclass(frozen=True)
class AnswerRead:
    """An answer read against a schema: `value`, the parsed JSON (None if it is not JSON, or
    JSON null), and `errors`, why it does not match (empty: it does)."""

    value: object = None
    errors: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def _unfenced(text: str) -> str:
    """The answer without a Markdown code fence around the whole of it (```json … ```)."""
    text = text.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        inner = text[3:-3]
        first, _, rest = inner.partition("\n")
        # The fence's info string (json, JSON, jsonc) is not part of the value.
        if rest and first.strip().isalpha():
            inner = rest
        text = inner.strip()
    return text


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"


def answer_read(schema: dict, content: str) -> AnswerRead:
    """Parse `content` as JSON and validate it against `schema`."""
    text = _unfenced(content or "")
    if not text:
        return AnswerRead(errors=["The answer is empty; it must be a JSON value."])
    try:
        value = json_loads_checked(text)
    except JSONInputError as exc:
        return AnswerRead(errors=[_clip(f"The answer is not JSON ({exc}).")])
    try:
        errors = [
            _clip(f"at {error.json_path}: {error.message}") for error in LinearValidator(schema).iter_errors(value)
        ][:MAX_ERRORS]
    except RecursionError:
        errors = ["The schema or the answer is nested too deeply to be checked."]
    except Unresolvable as exc:
        errors = [_clip(f"The schema has a reference that cannot be followed: {exc}")]
    # Stored on the run as it validated, except NUL (which PostgreSQL's jsonb cannot hold).
    return AnswerRead(value=scrub_nul(value), errors=errors)
