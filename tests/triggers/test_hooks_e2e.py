"""A signed request to a hook, through the real API, starts a run that a real Celery worker
completes against the shipped fake LLM; the run's trigger record names the hook and delivery."""

import json
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.models import Run, RunStatus
from conversations.selectors import run_final_answer
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for
from triggers.hooks import hook_signature
from triggers.models import Hook

pytestmark = pytest.mark.e2e

SCRIPT = {
    "scenarios": [{"match": "^Deploy 7 failed on web-2$", "steps": [{"content": "Rolling web-2 back."}]}],
    "fallback": {"content": "unexpected message"},
}


def test_a_signed_hook_request_runs_to_an_answer_on_the_worker(worker, fake_llm):
    model = fake_llm.script("hook-e2e", SCRIPT)
    agent = make_agent(model_config=ModelConfigFactory(base_url=fake_llm.api_base, model=model, max_retries=0))
    owner = User.objects.create_user("hook-e2e", password="owner-pass-1")
    hook = Hook.objects.create(
        agent=agent,
        name="deploys",
        secret="whsec_e2e",
        message="Deploy {{ payload.deploy }} failed on {{ payload.host }}",
        owner=owner,
    )
    body = json.dumps({"deploy": 7, "host": "web-2"}).encode()
    stamp = str(int(time.time()))
    response = Client().post(
        f"/api/v1/hooks/{hook.pk}/",
        body,
        content_type="application/json",
        HTTP_X_AGENTRY_TIMESTAMP=stamp,
        HTTP_X_AGENTRY_SIGNATURE=hook_signature(secret="whsec_e2e", timestamp=stamp, body=body),
        HTTP_X_AGENTRY_DELIVERY="deploy-7",
    )
    assert response.status_code == 202, response.content
    run = wait_for(
        lambda: Run.objects.filter(pk=response.json()["run"], status=RunStatus.COMPLETED).first(),
        timeout=60,
        message="the hook's run to complete",
    )
    assert run_final_answer(run=run).content == "Rolling web-2 back."
    assert run.hook_delivery.hook_id == hook.pk and run.hook_delivery.delivery_id == "deploy-7"
    assert run.conversation.owner == owner
