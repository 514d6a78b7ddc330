"""What started a run (Run.trigger): each way in records its own, the runs API shows and filters
by it, the admin's run list has it as a column and a filter, and the migration derives it for
runs written before it from what the ledger still says."""

import importlib
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from api.completions import CompletionRequest, completion_start
from console.monitoring.services import try_message_post
from conversations.models import Conversation, Run, RunTrigger
from engine.forks import ForkRequest, run_fork
from tests.security.privileges import user_with
from tests.support.api import client_for
from tests.support.ledger import ledger_run
from tests.support.runs import advance
from triggers.hooks import hook_deliver
from triggers.models import Hook, HookDelivery, Schedule, ScheduleFire
from triggers.schedules import schedules_fire_due
from widgets.models import Widget
from widgets.tokens import end_user_token_sign

pytestmark = pytest.mark.django_db

ANSWER = {"scenarios": [], "fallback": {"content": "done"}}
NINE = datetime(2026, 3, 2, 1, tzinfo=UTC)
SITE = "https://shop.example.com"


def _posted(api, agent) -> Run:
    conversation = api.post("/api/v1/conversations/", {"agent": agent.slug}, format="json").json()["id"]
    response = api.post(f"/api/v1/conversations/{conversation}/messages/", {"content": "hi"}, format="json")
    assert response.status_code == 202, response.content
    return Run.objects.get(pk=response.json()["id"])


def test_each_way_in_records_what_started_the_run(scripted_agent):
    agent = scripted_agent(ANSWER)
    user = user_with("conversations.view_run", superuser=True)
    api = client_for(user)

    posted = _posted(api, agent)
    request = CompletionRequest(
        model=agent.slug, system="", history=[], content="hi", stream=False, include_usage=False
    )
    completion = completion_start(user=user, agent=agent, request=request)
    hook = Hook.objects.create(agent=agent, name="orders", secret="s", message="{{ payload }}", owner=user)
    delivered = hook_deliver(hook=hook, delivery_id="d-1", signature="sig", content="hi", end_user="")
    Schedule.objects.create(agent=agent, name="daily", cron="0 9 * * *", message="report", next_fire_at=NINE)
    schedules_fire_due(now=NINE + timedelta(seconds=5))
    fired = ScheduleFire.objects.get().run
    tried = try_message_post(agent=agent, user=user, content="hi")
    widget = Widget.objects.create(
        agent=agent, name="shop", secret="wsec_test-secret-of-the-widget-0123456789", owner=user, allowed_origins=SITE
    )
    browser = Client(
        HTTP_AUTHORIZATION=f"Bearer {end_user_token_sign(widget=widget, end_user='alice')}", HTTP_ORIGIN=SITE
    )
    opened = browser.post(f"/api/v1/widget/{widget.pk}/conversations/", {}, content_type="application/json")
    sent = browser.post(
        f"/api/v1/widget/{widget.pk}/conversations/{opened.json()['id']}/messages/",
        {"content": "hi"},
        content_type="application/json",
    )
    assert sent.status_code == 202, sent.content
    chatted = Run.objects.get(pk=sent.json()["run"])
    forked = run_fork(source=advance(posted), request=ForkRequest(step=1), user=user)

    expected = {
        posted.pk: "api",
        completion.pk: "openai",
        delivered.pk: "hook",
        fired.pk: "schedule",
        tried.pk: "console",
        chatted.pk: "widget",
        forked.pk: "fork",
    }
    assert dict(Run.objects.filter(pk__in=expected).values_list("pk", "trigger")) == expected

    # The API shows it on the run and in the list, and filters by it.
    assert api.get(f"/api/v1/runs/{delivered.pk}/").json()["trigger"] == "hook"
    listed = api.get("/api/v1/runs/", {"trigger": "fork"}).json()["results"]
    assert [(run["id"], run["trigger"]) for run in listed] == [(str(forked.pk), "fork")]
    listed = api.get("/api/v1/runs/", {"trigger": "api"}).json()["results"]
    assert {run["id"] for run in listed} == {str(posted.pk)}


def test_an_unknown_trigger_filter_is_a_400(scripted_agent):
    response = client_for(user_with(staff=False)).get("/api/v1/runs/", {"trigger": "carrier-pigeon"})
    assert response.status_code == 400
    assert response.json()["message"].startswith("trigger: ")


def test_the_admins_run_list_shows_and_filters_by_trigger(admin_client, scripted_agent):
    agent = scripted_agent(ANSWER)
    by_hook = ledger_run(agent, trigger=RunTrigger.HOOK)
    by_api = ledger_run(agent)
    page = admin_client.get("/admin/conversations/run/").content.decode()
    assert "column-trigger" in page and "inbound hook" in page and "?trigger__exact=hook" in page
    filtered = admin_client.get("/admin/conversations/run/", {"trigger__exact": "hook"}).content.decode()
    assert str(by_hook.pk)[:8] in filtered and str(by_api.pk)[:8] not in filtered


def test_the_migration_derives_the_trigger_of_runs_written_before_it(scripted_agent):
    agent = scripted_agent(ANSWER)
    user = user_with(staff=False)
    parent = ledger_run(agent)
    runs = {
        "delegation": ledger_run(agent, parent_run=parent, sandbox={"fork": "x"}),
        "fork": ledger_run(agent, forked_from=parent),
        "fork of a purged run": ledger_run(agent, sandbox={"fork": "gone", "recorded": []}),
        "eval": ledger_run(agent, sandbox={"results": {}, "live_reads": True}),
        "schedule": ledger_run(agent),
        "hook": ledger_run(agent),
        "widget": ledger_run(agent),
        "openai": ledger_run(agent),
        "api": parent,
    }
    schedule = Schedule.objects.create(agent=agent, name="daily", cron="0 9 * * *", message="m", next_fire_at=NINE)
    ScheduleFire.objects.create(schedule=schedule, fire_at=NINE, outcome="started", run=runs["schedule"])
    hook = Hook.objects.create(agent=agent, name="h", secret="s", message="m", owner=user)
    HookDelivery.objects.create(hook=hook, delivery_id="d", signature="s", run=runs["hook"])
    Conversation.objects.filter(pk=runs["widget"].conversation_id).update(metadata={"widget": "42"})
    Conversation.objects.filter(pk=runs["openai"].conversation_id).update(metadata={"source": "chat.completions"})
    Run.objects.filter(pk__in=[run.pk for run in runs.values()]).update(trigger=RunTrigger.API)

    importlib.import_module("conversations.migrations.0024_run_trigger").triggers_derive(apps, None)

    found = dict(Run.objects.filter(pk__in=[run.pk for run in runs.values()]).values_list("pk", "trigger"))
    assert {name: found[run.pk] for name, run in runs.items()} == {
        "delegation": "delegation",
        "fork": "fork",
        "fork of a purged run": "fork",
        "eval": "eval",
        "schedule": "schedule",
        "hook": "hook",
        "widget": "widget",
        "openai": "openai",
        "api": "api",
    }


def test_a_conversation_the_api_started_is_not_taken_for_a_widget_s(scripted_agent):
    agent = scripted_agent(ANSWER)
    run = ledger_run(agent)
    Conversation.objects.filter(pk=run.conversation_id).update(metadata={"note": "widget"})
    importlib.import_module("conversations.migrations.0024_run_trigger").triggers_derive(apps, None)
    assert Run.objects.get(pk=run.pk).trigger == "api"


def test_the_schema_documents_the_trigger_and_its_filter():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    choices = [choice.value for choice in RunTrigger]
    assert components["TriggerEnum"]["enum"] == choices
    for name in ("RunList", "RunDetail"):
        assert "trigger" in components[name]["properties"]
    parameters = schema["paths"]["/api/v1/runs/"]["get"]["parameters"]
    assert next(p for p in parameters if p["name"] == "trigger")["schema"]["enum"] == choices
