"""The API contract: an OpenAPI 3 schema that validates, and a server that stays async."""

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command
from django.utils.module_loading import import_string
from drf_spectacular.generators import SchemaGenerator
from openapi_spec_validator import validate

pytestmark = pytest.mark.django_db


def test_the_generated_schema_is_valid_openapi_3_and_covers_every_endpoint():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate(schema)
    assert schema["openapi"].startswith("3.")
    assert {
        "/api/v1/agents/",
        "/api/v1/agents/{slug}/",
        "/api/v1/conversations/",
        "/api/v1/conversations/{id}/",
        "/api/v1/conversations/{id}/messages/",
        "/api/v1/runs/{id}/",
        "/api/v1/runs/{id}/steps/",
        "/api/v1/runs/{id}/cancel/",
        "/api/v1/runs/{run_id}/events/",
        "/v1/chat/completions",
    } <= set(schema["paths"])
    post = schema["paths"]["/api/v1/conversations/{id}/messages/"]["post"]
    assert {"202", "400", "409", "422"} <= set(post["responses"])
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in post["parameters"])


def test_schema_generation_has_no_warnings(tmp_path):
    # --fail-on-warn: every view is annotated well enough for the schema to be exact.
    call_command("spectacular", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    validate(yaml.safe_load((tmp_path / "schema.yaml").read_text()))


def test_schema_and_docs_pages_are_served(client):
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    validate(yaml.safe_load(schema.content))
    assert client.get("/api/docs/").status_code == 200


def test_every_middleware_is_async_capable():
    # One sync-only middleware makes Django hold a thread for every waiting request
    # (event streams, chat completions waiting for their run).
    sync_only = [path for path in settings.MIDDLEWARE if not getattr(import_string(path), "async_capable", False)]
    assert sync_only == []
