"""A failed run's error names what was tried (URL and model of each model config), and the
amounts a model call records in its events print in plain notation."""

import pytest

from conversations.models import RunEvent
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.llm import fake_model
from tests.support.runs import ask

pytestmark = pytest.mark.django_db


def test_a_run_that_fails_on_its_model_names_the_url_and_model(no_enqueue):
    model = ModelConfigFactory(name="primary", base_url="http://127.0.0.1:9/v1", model="gpt-x", max_retries=0)
    run = ask(make_agent(model_config=model), "hello")

    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert run.error == (
        "The model call failed after 1 attempt: "
        "Could not connect to http://127.0.0.1:9/v1/chat/completions (model 'gpt-x'): connection refused."
    )


def test_a_run_that_fails_on_its_fallback_too_names_both(fake_llm, no_enqueue):
    primary = ModelConfigFactory(name="primary", base_url="http://127.0.0.1:9/v1", model="gpt-x", max_retries=0)
    fallback = fake_model(fake_llm, {"fallback": {"content": "x", "fault": {"status": 503}}}, max_retries=0)
    fallback.name = "backup"
    fallback.save()
    run = ask(make_agent(model_config=primary, fallback_model_config=fallback), "hello")

    assert run.status == "failed"
    assert run.error.startswith(
        "The model call failed after 2 attempts: primary: Could not connect to "
        "http://127.0.0.1:9/v1/chat/completions (model 'gpt-x'): connection refused.; "
        f"backup: HTTP 503 from {fake_llm.api_base}/chat/completions (model '{fallback.model}'): "
    )


def test_a_tiny_cost_and_a_zero_price_print_without_an_exponent(fake_llm, no_enqueue):
    model = fake_model(
        fake_llm,
        {"fallback": {"content": "hi", "usage": {"prompt_tokens": 1, "completion_tokens": 0}}},
        price_input_per_million="0.01",
        price_output_per_million="0",
        price_cached_input_per_million="0",
    )
    run = ask(make_agent(model_config=model), "hello")

    completed = RunEvent.objects.get(run=run, type="llm_call.completed").payload
    # str() of this cost is "1E-8".
    assert completed["cost"] == "0.00000001"
    assert completed["prices"] == {
        "price_input_per_million": "0.010000",
        "price_output_per_million": "0.000000",
        "price_cached_input_per_million": "0.000000",
    }
