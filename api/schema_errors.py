"""The error responses that DRF's machinery around a view can give, added to every operation of
the OpenAPI schema: drf-spectacular documents what a view returns, not what authentication,
throttling, parsing, lookups and pagination answer before or after it. All use the API's one
error shape."""

ERROR = {"$ref": "#/components/schemas/Error"}

# The OpenAI-compatible endpoints answer in OpenAI's error shape and are documented by hand.
HAND_WRITTEN = ("/v1/",)
# Query parameters that select a page or a rendering: a bad value is a 404, not a 400.
PAGE_PARAMETERS = {"page", "format", "lang"}


def _error(description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


def _possible_errors(operation: dict) -> dict[str, str]:
    parameters = operation.get("parameters", [])
    errors = {"429": "Throttled; `Retry-After` says when to try again."}
    if any(scheme for scheme in operation.get("security", [])):
        errors["401"] = "Not authenticated, or the token is invalid or revoked."
    if any(p["in"] == "path" or p["name"] in PAGE_PARAMETERS for p in parameters):
        errors["404"] = "No such object among those you may see, or no such page."
    if "requestBody" in operation or any(
        p["in"] in ("query", "header") and p["name"] not in PAGE_PARAMETERS for p in parameters
    ):
        errors["400"] = "Bad input; the message names the field."
    if "requestBody" in operation:
        errors["413"] = "The request body is too large."
        errors["415"] = "The body is not JSON (or form data)."
    return errors


def document_error_responses(result, generator, request, public):
    for path, operations in result["paths"].items():
        if path.startswith(HAND_WRITTEN):
            continue
        for operation in operations.values():
            for status, description in _possible_errors(operation).items():
                operation["responses"].setdefault(status, _error(description))
    return result
