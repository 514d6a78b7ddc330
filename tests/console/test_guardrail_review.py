"""Operators review what guardrails caught: the runs list filtered to flagged runs (linked from
the operator nav, for those who may view runs), and each run's timeline listing its triggers
with what matched, masked."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from conversations.models import GuardrailTrigger
from tests.support.factories import make_agent
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db

REVIEW = reverse("admin:conversations_run_changelist") + "?guardrail=flag"


def _triggered(agent, action: str, *, stop_reason: str = "final_answer"):
    run = ledger_run(agent, stop_reason=stop_reason)
    GuardrailTrigger.objects.create(
        run=run, side="input", rule_id=7, kind="pii_phone", action=action, matched="***5678"
    )
    return run


@pytest.fixture
def operator(client):
    user = get_user_model().objects.create_user("oncall", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Operators"))
    client.force_login(user)
    return client


def test_the_review_list_shows_flagged_runs_only(operator):
    agent = make_agent()
    flagged = _triggered(agent, "flag")
    blocked = _triggered(agent, "block", stop_reason="guardrail_blocked")
    quiet = ledger_run(agent)

    page = operator.get(REVIEW).content.decode()
    assert str(flagged.pk) in page and str(blocked.pk) not in page and str(quiet.pk) not in page

    every = operator.get(reverse("admin:conversations_run_changelist") + "?guardrail=any").content.decode()
    assert str(flagged.pk) in every and str(blocked.pk) in every and str(quiet.pk) not in every


def test_an_unknown_filter_value_is_refused_like_any_bad_lookup(operator):
    response = operator.get(reverse("admin:conversations_run_changelist") + "?guardrail=everything")
    assert response.status_code == 302 and response["Location"].endswith("?e=1")


def test_the_review_list_needs_the_view_permission(client):
    clerk = get_user_model().objects.create_user("clerk", password="pw", is_staff=True)
    client.force_login(clerk)
    assert client.get(REVIEW).status_code == 403
    assert 'data-page="guardrails"' not in client.get(reverse("admin:index")).content.decode()


def test_the_timeline_lists_the_triggers_masked(operator):
    run = _triggered(make_agent(), "flag")

    page = operator.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    table = page.split('id="guardrails"')[1].split("</table>")[0]
    assert "pii_phone" in table and "***5678" in table and 'data-action="flag"' in table

    exported = operator.get(reverse("monitoring:run-json", args=[run.pk])).json()
    assert [(t["side"], t["kind"], t["action"], t["matched"]) for t in exported["guardrails"]] == [
        ("input", "pii_phone", "flag", "***5678")
    ]


def test_a_run_without_triggers_has_no_guardrails_section(operator):
    run = ledger_run(make_agent())
    assert 'id="guardrails"' not in operator.get(reverse("monitoring:run", args=[run.pk])).content.decode()
