"""One way in: `/` leads to the admin, the admin (branded Agentry) links every operator page the
user may open, admin names read well, and the runs list reads at a glance."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.urls import reverse
from django.utils import timezone

from conversations.models import Approval, Run, RunRequest, ToolInvocation
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db


def _links(page: str) -> dict[str, str]:
    """data-page → href of the operator links in the admin's header."""
    nav = page.split('class="operator-nav"')[1].split("</nav>")[0]
    return dict((key, href) for href, key in re.findall(r'<a href="([^"]+)" data-page="([^"]+)"', nav))


def _pending_approval(agent) -> Approval:
    run = ledger_run(agent, status="awaiting_approval", stop_reason="")
    call = ledger_call(run, started_at=timezone.now())
    invocation = ToolInvocation.objects.create(
        run=run,
        llm_call=call,
        tool_name="send-mail",
        tool_call_id="call_1",
        arguments={},
        status="awaiting_approval",
        idempotency_key="k",
    )
    return Approval.objects.create(invocation=invocation, run=run, arguments={}, arguments_hash="h")


def test_the_admin_is_branded_and_links_every_operator_page_with_the_pending_count(admin_client):
    agent = make_agent()
    for _ in range(2):
        _pending_approval(agent)

    page = admin_client.get(reverse("admin:index")).content.decode()

    assert "<title>Operations | Agentry</title>" in page and ">Agentry</a>" in page
    assert "Django administration" not in page
    assert _links(page) == {
        "monitoring": reverse("monitoring:dashboard"),
        "guardrails": reverse("admin:conversations_run_changelist") + "?guardrail=flag",
        "approvals": reverse("approvals:queue"),
        "try": reverse("monitoring:try"),
        "workspace-usage": reverse("workspace_usage"),
        "reviews": reverse("reviews:queues"),
        "api-docs": reverse("api-docs"),
    }
    assert '<span class="operator-count" title="pending approvals">2</span>' in page
    index = page.split('id="task-index"')[1]
    for url in _links(page).values():
        assert f'href="{url}"' in index
    # Every admin page carries the same header, the monitoring pages too.
    for url in (reverse("admin:conversations_run_changelist"), reverse("monitoring:try")):
        assert _links(admin_client.get(url).content.decode())["approvals"] == reverse("approvals:queue")


def test_links_follow_permissions(client):
    user = get_user_model().objects.create_user("clerk", password="pw", is_staff=True)
    client.force_login(user)
    assert _links(client.get(reverse("admin:index")).content.decode()) == {
        "api-docs": reverse("api-docs"),
    }

    user.groups.add(Group.objects.get(name="Operators"))
    links = _links(client.get(reverse("admin:index")).content.decode())
    assert set(links) == {"monitoring", "guardrails", "try", "api-docs"}
    for url in links.values():
        assert client.get(url).status_code == 200

    user.groups.add(Group.objects.get(name="Approvers"))
    links = _links(client.get(reverse("admin:index")).content.decode())
    assert set(links) == {"monitoring", "guardrails", "approvals", "try", "api-docs"}
    assert client.get(links["approvals"]).status_code == 200


def test_the_front_door_leads_to_the_admin_the_queue_and_the_docs(client):
    page = client.get("/").content.decode()
    for url in (reverse("admin:index"), reverse("approvals:queue"), reverse("api-docs")):
        assert f'href="{url}"' in page

    approver = get_user_model().objects.create_user("approver", password="pw")
    approver.groups.add(Group.objects.get(name="Approvers"))
    client.force_login(approver)
    page = client.get("/").content.decode()
    # An approver who is not staff is offered the queue, not an admin that would turn them away.
    assert f'href="{reverse("approvals:queue")}"' in page and f'href="{reverse("admin:index")}"' not in page

    refused = client.post("/")
    assert refused.status_code == 405 and refused.json()["message"]


def test_approval_pages_link_back_to_the_admin_for_staff(admin_client):
    page = admin_client.get(reverse("approvals:queue")).content.decode()
    assert f'href="{reverse("admin:index")}"' in page


def test_admin_names_read_well(admin_client):
    # The ledgers are named on their apps' pages (the index lists them nowhere).
    page = "".join(
        admin_client.get(url).content.decode()
        for url in [reverse("admin:index")]
        + [reverse("admin:app_list", args=[app]) for app in ("conversations", "notifications", "agents")]
    )
    for name in ("API tokens", "LLM calls", "Webhook deliveries", "Daily agent usage", "MCP servers"):
        assert f">{name}</a>" in page, name
    assert "deliverys" not in page and "Api tokens" not in page and "Llm calls" not in page


def test_the_runs_list_shows_question_agent_version_status_tokens_cost_and_duration(admin_client):
    agent = make_agent(name="Helpdesk")
    started = timezone.now().replace(microsecond=0) - timedelta(minutes=5)
    run = ledger_run(
        agent,
        created_at=started,
        finished_at=started + timedelta(seconds=2, milliseconds=500),
        total_tokens=1234,
        cost=Decimal("0.00042"),
    )
    RunRequest.objects.create(
        run=run, conversation=run.conversation, content="Where is my parcel? " * 10, content_hash="x"
    )
    free = ledger_run(agent, finished_at=timezone.now())
    assert Run.objects.get(pk=free.pk).cost == Decimal("0E-8")  # what str() would print

    page = admin_client.get(reverse("admin:conversations_run_changelist")).content.decode()

    row = page.split(f'title="{run.pk}"')[1].split("</tr>")[0]
    assert f">{str(run.pk)[:8]}</span>" in row
    assert "Where is my parcel? Where is my parcel?" in row and "…" in row
    assert "Helpdesk" in row and '"field-version">1<' in row and "Completed (final answer)" in row
    assert "1234" in row and "0.00042" in row and "2.5 s" in row
    assert timezone.localtime(started).strftime("%Y-%m-%d %H:%M:%S") in row
    assert f'href="{reverse("monitoring:run", args=[run.pk])}"' in row
    assert "0E-8" not in page and "E-" not in page
    free_row = page.split(f'title="{free.pk}"')[1].split("</tr>")[0]
    assert '<td class="field-cost_text">0</td>' in free_row


def test_costs_never_print_with_an_exponent_on_the_timeline(client, admin_user):
    client.force_login(admin_user)
    run = ledger_run(make_agent(), finished_at=timezone.now())
    ledger_call(run, started_at=timezone.now(), cost="0")

    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    data = client.get(reverse("monitoring:run-json", args=[run.pk])).json()
    events = client.get(reverse("monitoring:run-events", args=[run.pk])).json()

    assert "E-" not in page.split('id="timeline-data"')[0]
    assert data["run"]["cost"] == "0.00000000" and data["steps"][0]["cost"] == "0.00000000"
    assert events["run"]["cost"] == "0.00000000"
    change = client.get(reverse("admin:conversations_run_change", args=[run.pk])).content.decode()
    assert "0E-8" not in change


def test_short_ids_keep_the_whole_id_in_a_tooltip(client, admin_user, settings):
    client.force_login(admin_user)
    run = ledger_run(make_agent(), finished_at=timezone.now())
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    crumbs = page.split('class="breadcrumbs"')[1].split("</div>")[0]
    assert f'<span class="short-id" title="{run.pk}">{str(run.pk)[:8]}</span>' in crumbs


def test_view_only_staff_see_the_runs_list_without_operator_links(client):
    user = get_user_model().objects.create_user("reader", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(user)
    ledger_run(make_agent(), finished_at=timezone.now())
    page = client.get(reverse("admin:conversations_run_changelist")).content.decode()
    assert set(_links(page)) == {"monitoring", "guardrails", "api-docs"}
