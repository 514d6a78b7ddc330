"""HTTP tools: an endpoint described in the admin, called through the guarded HTTP seam.

Path placeholders, query parameters and the JSON body are filled from the validated
arguments; write tools send the call's idempotency key so the service can recognise a
retry of the same call.
"""

import json
from urllib.parse import quote

import httpx

from platform_site import outbound
from tools.models import URL_PLACEHOLDER, ToolDefinition, secret_mapping
from tools.registry import ToolContext, ToolError

_BODYLESS = {"GET", "DELETE"}


def load(spec: dict) -> dict[str, str]:
    """The tool's secret headers, from its live row."""
    stored = ToolDefinition.objects.filter(pk=spec["id"]).values_list("http_secret_headers", flat=True).first()
    return secret_mapping(stored or "")


def _query_value(value):
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else value


def build_request(http: dict, arguments: dict) -> dict:
    """Method, URL, query and body of one call; arguments are used once each."""
    rest = dict(arguments)

    def fill(match):
        return quote(str(rest.pop(match.group(1))), safe="")

    url = URL_PLACEHOLDER.sub(fill, http["url"])
    params = {name: _query_value(rest.pop(name)) for name in http["query_params"] if name in rest}
    body = None
    if http["body_argument"]:
        body = rest.pop(http["body_argument"], None)
    if http["method"] in _BODYLESS:
        params.update({name: _query_value(value) for name, value in rest.items()})
    elif rest and body is None:
        body = rest
    return {"method": http["method"], "url": url, "params": params or None, "json": body}


def _pointer(value, pointer: str):
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        elif isinstance(value, dict) and token in value:
            value = value[token]
        else:
            raise ToolError(f"the response has nothing at {pointer} (missing {token!r}).")
    return value


def run(*, spec: dict, arguments: dict, ctx: ToolContext, loaded: dict[str, str]):
    http = spec["http"]
    request = build_request(http, arguments)
    headers = {"Accept": "application/json", **http["headers"], **loaded}
    if spec["side_effect"] == "write":
        headers["Idempotency-Key"] = ctx.idempotency_key
    try:
        fetched = outbound.guarded_request(
            request["method"], request["url"], headers=headers, params=request["params"], json=request["json"],
            timeout_seconds=spec["timeout_seconds"], max_bytes=http["max_response_bytes"],
            secret_headers=tuple(loaded),
        )
    except outbound.OutboundBlocked as exc:
        raise ToolError(exc.message)
    except httpx.TimeoutException:
        raise ToolError(f"the service did not answer within {spec['timeout_seconds']} s.")
    except httpx.HTTPError as exc:
        raise ToolError(f"the service could not be reached ({type(exc).__name__}: {exc}).")
    response = fetched.response
    text = fetched.text()
    if response.status_code >= 400:
        raise ToolError(f"the service answered HTTP {response.status_code} {response.reason_phrase}: {text[:500]}")
    if not text.strip():
        return f"HTTP {response.status_code} {response.reason_phrase} (no content)."
    if "json" not in response.headers.get("content-type", ""):
        return text + (f"\n… [cut at {http['max_response_bytes']} bytes]" if fetched.truncated else "")
    if fetched.truncated:
        raise ToolError(f"the response is larger than this tool's limit of {http['max_response_bytes']} bytes; "
                        "narrow the request (filters, a smaller page).")
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return _pointer(value, http["response_pointer"]) if http["response_pointer"] else value
