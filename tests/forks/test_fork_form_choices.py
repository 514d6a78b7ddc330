"""The timeline's "Fork from here" form holds the rule a posted message holds (agents.run_choices):
naming a version takes the permission to test agent versions, a model config the agent does not
use takes the permission to change model configs; refused, the timeline comes back with the
reason (403) and no fork is made."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from agents.models import Agent
from conversations.models import Run
from tests.support.llm import agent_on, fake_model
from tests.support.runs import ask

pytestmark = pytest.mark.django_db

SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [{"tool_calls": [{"name": "test-echo", "arguments": {"text": "alpha"}}]}, {"content": "done"}],
        }
    ]
}


@pytest.fixture
def source(fake_llm, no_enqueue):
    run = ask(agent_on(fake_llm, SCRIPT), "hello")
    assert run.status == "completed", run.error
    return run


def _staff(client, *codenames: str):
    user = get_user_model().objects.create_user("forker", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_run", "fork_run", *codenames]))
    client.force_login(user)
    return user


def _post(client, source, **data):
    return client.post(reverse("monitoring:run-fork", args=[source.pk, 2]), data)


def test_a_version_is_chosen_only_with_the_permission_to_test_versions(client, source):
    _staff(client)
    refused = _post(client, source, change="version", version="draft")
    assert refused.status_code == 403
    assert "Choosing the version to run takes the permission to test agent versions." in refused.content.decode()
    assert 'id="fork-step-2"' in refused.content.decode()  # the timeline again, its form with it
    assert not Run.objects.filter(forked_from=source).exists()

    client.logout()
    get_user_model().objects.filter(username="forker").delete()
    _staff(client, "test_agent_version")
    allowed = _post(client, source, change="version", version="draft")
    fork = Run.objects.get(forked_from=source)
    assert allowed.status_code == 302 and fork.fork_change["version"] == source.agent_version.number


def test_a_model_config_the_agent_does_not_use_takes_the_permission_to_change_configs(client, fake_llm, source):
    user = _staff(client)
    other = fake_model(fake_llm, SCRIPT)
    refused = _post(client, source, change="model", model_config=other.pk)
    assert refused.status_code == 403
    assert "takes the permission to change model configs" in refused.content.decode()
    assert not Run.objects.filter(forked_from=source).exists()

    # The agent's own config is one it uses: no further permission.
    own = Agent.objects.get(pk=source.agent_id).model_config_id
    assert _post(client, source, change="model", model_config=own).status_code == 302

    user.user_permissions.add(Permission.objects.get(codename="change_modelconfig"))
    assert _post(client, source, change="model", model_config=other.pk).status_code == 302
    assert Run.objects.filter(forked_from=source).count() == 2
