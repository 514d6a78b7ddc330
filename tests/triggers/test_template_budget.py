"""Prompt templates over their budget of work, where they are saved and where they run: a hook's
template, a schedule's message and a system prompt are refused on save with an error naming the
limit, and a template saved before the budget existed fails its delivery or fire with that error
at once instead of holding a thread for minutes."""

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from agents.prompt_budget import MAX_STEPS
from agents.prompting import system_prompt_check
from tests.support.factories import make_agent
from tests.triggers.test_hooks import SECRET, _post, _signed
from tests.triggers.test_schedules import ANSWER, NINE, _form, make_schedule
from tests.unit.agents.test_prompt_budget import NESTED_LOOPS
from triggers.models import Hook, Schedule
from triggers.schedules import schedules_fire_due

pytestmark = pytest.mark.django_db

LIMIT = f"{MAX_STEPS} steps"


def test_a_hook_editor_cannot_save_a_template_over_the_budget():
    editor = User.objects.create_user("hook-editor", password="pw", is_staff=True)
    editor.user_permissions.add(*Permission.objects.filter(codename__in=["add_hook", "view_hook"]))
    client = Client()
    client.force_login(editor)
    response = client.post(
        "/admin/triggers/hook/add/",
        {"agent": make_agent().pk, "name": "loops", "enabled": "on", "message": NESTED_LOOPS, "end_user": ""},
    )
    assert response.status_code == 200
    assert LIMIT in " ".join(response.context["adminform"].form.errors["message"])
    assert not Hook.objects.exists()


def test_a_delivery_to_a_hook_saved_over_the_budget_is_a_400_naming_the_limit(no_enqueue):
    # Written past the admin's check, as a hook saved before the budget existed was.
    hook = Hook.objects.create(agent=make_agent(), name="old", secret=SECRET, message=NESTED_LOOPS)
    body = json.dumps({"a": 1}).encode()
    response = _post(hook.pk, body, **_signed(body))
    assert response.status_code == 400 and LIMIT in response.json()["message"]


def test_a_schedule_over_the_budget_is_a_form_error_and_an_old_one_fails_its_fire(admin_client, scripted_agent):
    agent = scripted_agent(ANSWER)
    response = admin_client.post(reverse("admin:triggers_schedule_add"), _form(agent, message=NESTED_LOOPS))
    assert response.status_code == 200
    assert LIMIT in " ".join(response.context["adminform"].form.errors["message"])
    assert not Schedule.objects.exists()
    old = make_schedule(agent, message=NESTED_LOOPS)
    assert schedules_fire_due(now=NINE) == {"failed": 1}
    fire = old.fires.get()
    assert fire.run is None and LIMIT in fire.detail


def test_a_system_prompt_over_the_budget_is_refused_naming_the_limit():
    with pytest.raises(ValidationError) as error:
        system_prompt_check(template=NESTED_LOOPS, time_zone="UTC", agent_name="a")
    assert LIMIT in " ".join(error.value.messages)
