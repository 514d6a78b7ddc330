"""Reading an OpenAPI 3 document into HTTP tool descriptions.

Each operation becomes one tool: its path and query parameters and its JSON request body
(as one argument, `body`) become the tool's JSON Schema. Local `$ref`s are inlined, since a
model sees the schema alone; OpenAPI 3.0's schema dialect is brought to JSON Schema where it
differs (`nullable`, boolean exclusive bounds).
"""

import json
import re
from dataclasses import dataclass

import yaml

METHODS = ("get", "post", "put", "patch", "delete")
_DROPPED_KEYWORDS = {"example", "examples", "xml", "externalDocs", "discriminator"}


class OpenAPIError(ValueError):
    pass


@dataclass
class Operation:
    name: str
    method: str
    url: str
    description: str
    parameters: dict
    query_params: list[str]
    body_argument: str


def load_document(text: str) -> dict:
    text = text.strip()
    if not text:
        raise OpenAPIError("The document is empty.")
    try:
        document = json.loads(text) if text.startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise OpenAPIError(f"The document is neither valid JSON nor valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise OpenAPIError("The document must be a JSON or YAML object.")
    version = str(document.get("openapi", ""))
    if not version.startswith("3."):
        found = f"swagger {document['swagger']}" if "swagger" in document else "no openapi version"
        raise OpenAPIError(f"Only OpenAPI 3 documents can be imported (found {found}).")
    if not isinstance(document.get("paths"), dict) or not document["paths"]:
        raise OpenAPIError("The document has no paths.")
    return document


class _Resolver:
    def __init__(self, document: dict):
        self.document = document

    def lookup(self, ref: str):
        if not ref.startswith("#/"):
            raise OpenAPIError(f"Only references inside the document are supported, not {ref!r}.")
        node = self.document
        for token in ref[2:].split("/"):
            token = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or token not in node:
                raise OpenAPIError(f"The reference {ref!r} points to nothing.")
            node = node[token]
        return node

    def deref(self, node):
        seen = set()
        while isinstance(node, dict) and "$ref" in node:
            if node["$ref"] in seen:
                raise OpenAPIError(f"The reference {node['$ref']!r} refers to itself.")
            seen.add(node["$ref"])
            node = self.lookup(node["$ref"])
        return node

    def schema(self, node, stack: tuple = ()):
        """A self-contained JSON Schema; a recursive reference is cut to a plain object."""
        if isinstance(node, list):
            return [self.schema(item, stack) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            ref = node["$ref"]
            if ref in stack:
                return {"type": "object", "description": f"(recursive: {ref.rsplit('/', 1)[-1]})"}
            return self.schema(self.lookup(ref), stack + (ref,))
        out = {key: self.schema(value, stack) for key, value in node.items() if key not in _DROPPED_KEYWORDS}
        if out.pop("nullable", False) and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(out.get(bound), bool):
                if out.pop(bound) and limit in out:
                    out[bound] = out.pop(limit)
        return out


def _server_url(document: dict, base_url: str) -> str:
    if base_url:
        url = base_url
    else:
        servers = document.get("servers") or [{}]
        server = servers[0] if isinstance(servers[0], dict) else {}
        url = server.get("url", "")
        for name, variable in (server.get("variables") or {}).items():
            url = url.replace("{" + name + "}", str(variable.get("default", "")))
    if not re.match(r"^https?://[^/]+", url):
        raise OpenAPIError(
            f"The document's server URL {url!r} is not an absolute http(s) URL; enter the API's base URL."
        )
    return url.rstrip("/")


def _operation_name(method: str, path: str, operation: dict) -> str:
    if operation.get("operationId"):
        return str(operation["operationId"])
    words = re.sub(r"[{}]", "", path).strip("/").replace("/", "_") or "root"
    return f"{method}_{words}"


def _describe(method: str, path: str, operation: dict) -> str:
    text = " ".join(p.strip() for p in (operation.get("summary"), operation.get("description")) if p)
    return (text or f"{method.upper()} {path}")[:1000]


def operations(document: dict, *, base_url: str = "") -> list[Operation]:
    resolver = _Resolver(document)
    server = _server_url(document, base_url)
    found = []
    for path, item in document["paths"].items():
        item = resolver.deref(item)
        shared = item.get("parameters") or []
        for method in METHODS:
            if method not in item:
                continue
            operation = item[method]
            properties, required, query = {}, [], []
            by_key = {}
            for parameter in list(shared) + list(operation.get("parameters") or []):
                parameter = resolver.deref(parameter)
                by_key[(parameter.get("in"), parameter.get("name"))] = parameter  # operation-level wins
            for (location, name), parameter in by_key.items():
                if location not in ("path", "query"):
                    continue  # headers and cookies are the tool's configuration, not the model's
                schema = resolver.schema(parameter.get("schema") or {"type": "string"})
                if parameter.get("description") and "description" not in schema:
                    schema["description"] = parameter["description"]
                properties[name] = schema
                if location == "path" or parameter.get("required"):
                    required.append(name)
                if location == "query":
                    query.append(name)
            body_argument = ""
            body = resolver.deref(operation.get("requestBody") or {})
            content = body.get("content") or {}
            json_type = next((t for t in content if "json" in t), None)
            if json_type:
                body_argument = "body" if "body" not in properties else "request_body"
                properties[body_argument] = resolver.schema(content[json_type].get("schema") or {})
                if body.get("required"):
                    required.append(body_argument)
            parameters = {"type": "object", "properties": properties}
            if required:
                parameters["required"] = required
            found.append(
                Operation(
                    name=_operation_name(method, path, operation),
                    method=method.upper(),
                    url=server + path,
                    description=_describe(method, path, operation),
                    parameters=parameters,
                    query_params=query,
                    body_argument=body_argument,
                )
            )
    return found
