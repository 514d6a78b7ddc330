"""What the operator pages print: sub-agents marked on the Try page, times in the site's time
zone with the zone named (one format on every page), token totals that say what they count, and
read-only JSON as JSON."""

from datetime import UTC, datetime

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.models import AgentDelegate
from conversations.models import Approval, LLMCall, ToolInvocation
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run

pytestmark = pytest.mark.django_db

MOMENT = datetime(2026, 12, 7, 5, 30, 5, tzinfo=UTC)


def test_the_try_page_marks_sub_agents_and_lists_them_last(client, staff):
    router = make_agent(name="Router")
    orders = make_agent(name="Orders")
    make_agent(name="Zeta helpdesk")
    AgentDelegate.objects.create(parent=router, child=orders, tool_name="ask_orders", description="orders")
    AgentDelegate.objects.create(
        parent=make_agent(name="Disabled caller"), child=router, tool_name="ask_router", description="x", enabled=False
    )

    page = client.get(reverse("monitoring:try")).content.decode()

    select = page.split('name="agent"')[1].split("</select>")[0]
    assert "Orders (sub-agent, called by Router)" in select
    assert ">Router<" in select  # a disabled delegation does not make it a sub-agent
    assert select.index("Zeta helpdesk") < select.index("Orders (sub-agent")
    assert "meant to be called by another agent" in page


@pytest.mark.parametrize(
    ("zone", "printed"),
    [("UTC", "2026-12-07 05:30:05 UTC"), ("Asia/Shanghai", "2026-12-07 13:30:05 CST")],
)
def test_times_are_in_the_site_s_zone_with_its_name_on_every_operator_page(admin_client, settings, zone, printed):
    settings.TIME_ZONE = zone
    run = ledger_run(make_agent(), finished_at=MOMENT, created_at=MOMENT)
    invocation = ToolInvocation.objects.create(
        run=run, llm_call=ledger_call(run, started_at=MOMENT), tool_call_id="c1", tool_name="t", arguments={}
    )
    approval = Approval.objects.create(run=run, invocation=invocation, arguments={}, arguments_hash="x")
    Approval.objects.filter(pk=approval.pk).update(created_at=MOMENT, status="approved", decided_at=MOMENT)

    timeline = admin_client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    admin_page = admin_client.get(reverse("admin:conversations_run_change", args=[run.pk])).content.decode()
    approval_page = admin_client.get(reverse("approvals:detail", args=[approval.pk])).content.decode()

    assert printed in timeline
    assert printed in admin_page
    assert printed in approval_page


def test_the_dashboard_says_what_each_token_total_counts(client, staff, settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    page = client.get(reverse("monitoring:dashboard")).content.decode()
    assert "Per calendar day in CST" in page and "day (CST)" in page
    assert client.get(reverse("monitoring:data")).json()["time_zone"] == "CST"


def test_read_only_json_is_shown_as_indented_escaped_json(admin_client):
    run = ledger_run(make_agent())
    call = ledger_call(run, started_at=timezone.now())
    request = {"messages": [{"role": "user", "content": "<b>it's</b>"}], "stream": False, "stop": None}
    LLMCall.objects.filter(pk=call.pk).update(request=request, response={"usage": {"cached": True}})
    invocation = ToolInvocation.objects.create(
        run=run, llm_call=call, tool_call_id="c1", tool_name="t", arguments={"n": None}, validation_errors=[]
    )
    approval = Approval.objects.create(run=run, invocation=invocation, arguments={"n": 1}, arguments_hash="x")

    call_page = admin_client.get(reverse("admin:conversations_llmcall_change", args=[call.pk])).content.decode()
    run_page = admin_client.get(reverse("admin:conversations_run_change", args=[run.pk])).content.decode()
    invocation_page = admin_client.get(
        reverse("admin:conversations_toolinvocation_change", args=[invocation.pk])
    ).content.decode()
    approval_page = admin_client.get(
        reverse("admin:conversations_approval_change", args=[approval.pk])
    ).content.decode()

    # Indented (PostgreSQL's jsonb orders the keys: shortest first).
    indented = "&quot;messages&quot;: [\n    {\n      &quot;role&quot;: &quot;user&quot;,\n"
    assert indented in call_page
    assert indented in run_page
    for page in (call_page, run_page):
        assert "&lt;b&gt;it&#x27;s&lt;/b&gt;" in page and "<b>it" not in page
        assert "&quot;stream&quot;: false" in page and "&quot;stop&quot;: null" in page
        assert "&quot;cached&quot;: true" in page
        assert "&#x27;role&#x27;" not in page and "&#x27;stop&#x27;: None" not in page  # no Python repr
    assert '<pre class="json">[]</pre>' in invocation_page  # empty, still JSON
    assert "&quot;n&quot;: null" in invocation_page
    assert "&quot;n&quot;: null" in approval_page  # the model's arguments beside the decided ones
