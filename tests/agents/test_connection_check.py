"""Test connection on a model config: a tiny request through the provider adapter to the shipped
fake model server (and to servers that fail), with the answer, the latency, the models the
server lists, or the exact error; a POST with CSRF, for those who may change the config. And the
key field, which says one thing that fits the config."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agents.connection_check import PROMPT
from agents.models import ModelConfig
from tests.support.factories import ModelConfigFactory
from tests.support.llm import fake_model
from tests.support.servers import serve

pytestmark = pytest.mark.django_db

KEY = "sk-test-0123456789abcdefWXYZ"


def _url(config) -> str:
    return reverse("admin:agents_modelconfig_test_connection", args=[config.pk])


def _text(html: str, element_id: str) -> str:
    return re.search(rf'id="{element_id}"[^>]*>(.*?)</', html, re.S).group(1).strip()


@pytest.mark.parametrize("provider", ["openai_compatible", "anthropic"])
def test_a_working_config_answers_and_its_server_lists_the_model(admin_client, fake_llm, provider):
    config = fake_model(fake_llm, {"fallback": {"content": "OK"}}, provider=provider, api_key=KEY)

    response = admin_client.post(_url(config))

    page = response.content.decode()
    assert response.status_code == 200 and 'data-ok="true"' in page
    assert _text(page, "connection-answer") == "OK"
    assert re.search(r"in \d+ ms \(HTTP 200\)", page)
    assert f"<li><code>{config.model}</code></li>" in page and "The configured model is among them." in page
    [sent] = fake_llm.requests(config.model)[-1:]
    # As a run sends it: on Anthropic with the prompt cache's breakpoint closing the message.
    closed = [{"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}}]
    assert sent["messages"][-1]["content"] == (closed if provider == "anthropic" else PROMPT)
    if provider == "anthropic":
        assert sent["max_tokens"] == 16
    assert KEY not in page


def test_an_unknown_model_shows_the_servers_error_and_what_it_lists(admin_client, fake_llm):
    fake_model(fake_llm, {"fallback": {"content": "OK"}})
    config = ModelConfigFactory(base_url=fake_llm.api_base, model="no-such-model")

    page = admin_client.post(_url(config)).content.decode()

    assert 'data-ok="false"' in page
    error = _text(page, "connection-error")
    assert error.startswith(f"HTTP 404 from {fake_llm.api_base}/chat/completions (model &#x27;no-such-model&#x27;)")
    assert "The configured model is not among them." in page and "<li><code>" in page


def test_a_closed_port_is_named_with_the_url_and_model_tried(admin_client):
    config = ModelConfigFactory(base_url="http://127.0.0.1:9/v1", model="gpt-x")

    page = admin_client.post(_url(config)).content.decode()

    assert _text(page, "connection-error") == (
        "Could not connect to http://127.0.0.1:9/v1/chat/completions (model &#x27;gpt-x&#x27;): connection refused."
    )
    assert _text(page, "models-error") == "Not asked: the chat request got no answer from this server."


def test_a_slow_model_times_out_with_a_readable_message(admin_client, fake_llm):
    config = fake_model(fake_llm, {"fallback": {"content": "OK", "latency_ms": 3000}}, read_timeout_seconds=0.3)

    page = admin_client.post(_url(config)).content.decode()

    assert _text(page, "connection-error") == (
        f"The request to {fake_llm.api_base}/chat/completions (model &#x27;{config.model}&#x27;) timed out "
        "after 0.3 s without an answer."
    )


@pytest.fixture
def echoing_server():
    """A server that repeats the key it was sent in its errors, as some proxies do."""

    def refuse(request: Request):
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        return JSONResponse({"error": {"message": f"Incorrect API key provided: {key}."}}, status_code=401)

    app = Starlette(routes=[Route("/v1/chat/completions", refuse, methods=["POST"]), Route("/v1/models", refuse)])
    base_url, stop = serve(app)
    yield f"{base_url}/v1"
    stop()


def test_the_key_never_reaches_the_page_even_when_the_server_echoes_it(admin_client, echoing_server):
    config = ModelConfigFactory(base_url=echoing_server, model="gpt-x", api_key=KEY)

    page = admin_client.post(_url(config)).content.decode()

    assert KEY not in page and "WXYZ" in page  # masked: only the last characters
    assert "HTTP 401 from" in _text(page, "connection-error") and "Incorrect API key provided" in page
    assert _text(page, "models-error").startswith(f"HTTP 401 from {echoing_server}/models")


def test_only_a_post_with_csrf_by_someone_who_may_change_the_config(client, fake_llm):
    config = fake_model(fake_llm, {"fallback": {"content": "OK"}})
    url = _url(config)
    assert client.post(url).status_code == 302  # to the admin's login

    user = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_modelconfig"))
    client.force_login(user)
    assert client.post(url).status_code == 403
    change_form = client.get(reverse("admin:agents_modelconfig_change", args=[config.pk])).content.decode()
    assert url not in change_form

    user.user_permissions.add(Permission.objects.get(codename="change_modelconfig"))
    user = get_user_model().objects.get(pk=user.pk)
    client.force_login(user)
    assert url in client.get(reverse("admin:agents_modelconfig_change", args=[config.pk])).content.decode()
    wrong = client.get(url)
    assert wrong.status_code == 405 and wrong.json()["message"]
    assert client.post(reverse("admin:agents_modelconfig_test_connection", args=[config.pk + 1000])).status_code == 404
    assert client.post(url).status_code == 200

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    assert strict.post(url).status_code == 403
    form = strict.get(reverse("admin:agents_modelconfig_change", args=[config.pk])).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    assert strict.post(url, {"csrfmiddlewaretoken": token}).status_code == 200


def test_a_new_configs_key_field_does_not_talk_of_a_stored_key(admin_client):
    page = admin_client.get(reverse("admin:agents_modelconfig_add")).content.decode()
    assert "not set" not in page and "Leave empty to keep" not in page and "Remove the stored key" not in page
    assert "Leave empty for a server that needs no key." in page
    assert "Test connection" not in page

    with_key = ModelConfigFactory(api_key=KEY)
    page = admin_client.get(reverse("admin:agents_modelconfig_change", args=[with_key.pk])).content.decode()
    assert "set (••••••••WXYZ)" in page and "Leave empty to keep the current key." in page
    assert "Remove the stored key" in page and KEY not in page and "Test connection" in page

    without_key = ModelConfigFactory()
    page = admin_client.get(reverse("admin:agents_modelconfig_change", args=[without_key.pk])).content.decode()
    assert "not set" in page and "Leave empty to keep" not in page and "Remove the stored key" not in page
    assert "No key is stored." in page


def test_a_new_config_is_saved_with_its_key(admin_client):
    data = {
        "name": "local",
        "provider": "openai_compatible",
        "base_url": "http://10.0.0.5:8080/v1",
        "model": "qwen",
        "new_api_key": KEY,
        "stop": "[]",
        "response_format": "text",
        "extra_params": "{}",
        "connect_timeout_seconds": 10,
        "read_timeout_seconds": 120,
        "max_retries": 2,
        "price_input_per_million": 0,
        "price_output_per_million": 0,
        "price_cached_input_per_million": 0,
    }
    response = admin_client.post(reverse("admin:agents_modelconfig_add"), data)
    assert response.status_code == 302
    assert ModelConfig.objects.get(name="local").api_key == KEY


def _form(**fields) -> dict:
    return {
        "name": "local",
        "provider": "openai_compatible",
        "stop": "[]",
        "response_format": "text",
        "extra_params": "{}",
        "connect_timeout_seconds": 10,
        "read_timeout_seconds": 120,
        "max_retries": 2,
        "price_input_per_million": 0,
        "price_output_per_million": 0,
        "price_cached_input_per_million": 0,
        **fields,
    }


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]] if response.context else []


def test_saving_a_connection_checks_it_and_the_save_stands_either_way(admin_client, fake_llm):
    name = fake_llm.script("checked-on-save", {"fallback": {"content": "OK"}})
    response = admin_client.post(
        reverse("admin:agents_modelconfig_add"), _form(base_url=fake_llm.api_base, model=name), follow=True
    )
    assert any(m.startswith(f"Connection checked: {name} answered in") for m in _messages(response))
    config = ModelConfig.objects.get(name="local")
    asked = len(fake_llm.requests(name))
    assert asked == 1

    # A change that touches no part of the connection asks nothing.
    change = reverse("admin:agents_modelconfig_change", args=[config.pk])
    response = admin_client.post(change, _form(base_url=fake_llm.api_base, model=name, temperature="0.2"), follow=True)
    assert not any("onnection" in m for m in _messages(response))
    assert len(fake_llm.requests(name)) == asked

    # A closed port: saved, and the warning says why and what to do.
    response = admin_client.post(change, _form(base_url="http://127.0.0.1:9/v1", model=name), follow=True)
    [warning] = [m for m in _messages(response) if m.startswith("Saved, but the connection check failed")]
    assert "127.0.0.1:9" in warning
    config.refresh_from_db()
    assert config.base_url == "http://127.0.0.1:9/v1"
