"""The operator pages in a workspace: two workspaces, Alpha and Bravo, each with an agent, a run
parked on an approval, ended runs in the rollups, and an eval run. A member of Alpha (operator,
approver, viewer) reads nothing of Bravo's on any page or JSON (names, run ids, approval ids,
counts, Prometheus lines); Bravo's run, approval and eval URLs answer 404; the header's switcher
offers Alpha only. A member of both switches and then reads Bravo. Each role opens the pages its
row allows and no others."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from agents.services import agent_version_current
from conversations.models import Approval
from conversations.monitoring.rollups import rollups_refresh
from evals.models import EvalRun, EvalRunStatus, EvalSuite
from tests.support.ledger import ledger_call, ledger_run
from tests.support.runs import advance, start_run
from workspaces.access import SESSION_KEY
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

SCRIPT = {
    "scenarios": [
        {
            "match": ".",
            "steps": [{"tool_calls": [{"name": "test-counter", "arguments": {"label": "x"}}]}, {"content": "done"}],
        }
    ]
}


class Side:
    """One workspace's rows."""

    def __init__(self, workspace, tag, scripted_agent):
        now = timezone.now()
        self.workspace, self.tag = workspace, tag
        self.agent = scripted_agent(
            SCRIPT,
            tools=["test-counter"],
            approval={"test-counter": "always"},
            workspace=workspace,
            name=f"{tag}-agent-name",
            slug=f"{tag}-agent",
            model_fields={"workspace": workspace, "name": f"{tag}-model-name"},
        )
        self.parked = advance(start_run(self.agent, "record"))
        assert self.parked.status == "awaiting_approval", self.parked.error
        self.approval = Approval.objects.get(run=self.parked)
        self.ended = ledger_run(self.agent, finished_at=now)
        ledger_call(self.ended, started_at=now - timedelta(minutes=1))
        self.failed = ledger_run(
            self.agent, status="failed", stop_reason="provider_error", error=f"{tag}-error-text", finished_at=now
        )
        ledger_call(self.failed, started_at=now - timedelta(minutes=1), status="failed", error=f"{tag}-error-text")
        suite = EvalSuite.objects.create(workspace=workspace, name=f"{tag}-suite-name")
        self.eval_run = EvalRun.objects.create(
            suite=suite,
            agent_version=agent_version_current(agent=self.agent),
            repetitions=1,
            status=EvalRunStatus.COMPLETED,
            metrics={},
            finished_at=now,
        )

    def secrets(self) -> list[str]:
        """What of this workspace no other workspace's member may read."""
        return [
            self.tag,
            self.workspace.name,
            str(self.parked.pk),
            str(self.ended.pk),
            str(self.failed.pk),
        ]


@pytest.fixture
def world(scripted_agent):
    alpha = Workspace.objects.get(pk=default_workspace_id())
    Workspace.objects.filter(pk=alpha.pk).update(name="Alpha team")
    alpha.refresh_from_db()
    bravo = Workspace.objects.create(name="Bravo team", slug="bravo")
    a, b = Side(alpha, "alpha", scripted_agent), Side(bravo, "bravo", scripted_agent)
    rollups_refresh(since=timezone.now() - timedelta(hours=2))
    return a, b


def member(client, *workspaces, role: str, name: str = "member") -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for workspace in workspaces:
        membership_set(user=user, workspace=workspace, role=role)
    client.force_login(user)
    return user


def pages(a) -> list[str]:
    """Every operator page and JSON (GET) a member may be shown, with Alpha's ids where one is needed."""
    return [
        "/",
        reverse("admin:index"),
        reverse("monitoring:dashboard"),
        reverse("monitoring:panel"),
        reverse("monitoring:data"),
        reverse("monitoring:try"),
        reverse("monitoring:agent", args=[a.agent.slug]),
        reverse("monitoring:run", args=[a.parked.pk]),
        reverse("monitoring:run-json", args=[a.parked.pk]),
        reverse("monitoring:run-events", args=[a.parked.pk]),
        reverse("approvals:queue"),
        reverse("approvals:poll"),
        reverse("approvals:history"),
        reverse("approvals:detail", args=[a.approval.pk]),
        reverse("evals:compare") + f"?baseline={a.eval_run.pk}&candidate={a.eval_run.pk}",
        "/metrics",
    ]


def _read(client, url: str) -> tuple[int, str]:
    response = client.get(url)
    return response.status_code, response.content.decode()


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.APPROVER, Role.VIEWER])
def test_a_member_of_alpha_reads_nothing_of_bravo(client, world, role):
    a, b = world
    member(client, a.workspace, role=role)
    opened = []
    for url in pages(a):
        status, text = _read(client, url)
        assert status in (200, 403), (url, status)
        if status == 200:
            opened.append(url)
        leaked = [secret for secret in b.secrets() if secret in text]
        assert not leaked, (url, leaked)
    # Each role opens something, and what it opens shows Alpha's own.
    assert reverse("admin:index") in opened
    status, dashboard = _read(client, reverse("monitoring:dashboard"))
    if role != Role.APPROVER:
        assert status == 200 and "alpha-agent-name" in dashboard


def test_the_dashboard_json_counts_only_alpha(client, world):
    a, b = world
    member(client, a.workspace, role=Role.OPERATOR)
    data = client.get(reverse("monitoring:data")).json()
    assert data["runs_now"]["awaiting_approval"] == 1
    assert data["outcomes"]["runs_ended"] == 2 and data["outcomes"]["runs_failed"] == 1
    assert [row["message"] for row in data["outcomes"]["top_errors"]] == ["alpha-error-text"] * 2
    assert [agent["name"] for agent in data["usage"]["agents"]] == ["alpha-agent-name"]
    assert [row["name"] for row in data["latency"]] == ["alpha-model-name"]


def test_the_queue_and_the_header_count_only_alpha_s_approvals(client, world):
    a, b = world
    member(client, a.workspace, role=Role.OPERATOR)
    poll = client.get(reverse("approvals:poll")).json()
    assert [card["id"] for card in poll["cards"]] == [a.approval.pk]
    index = client.get(reverse("admin:index")).content.decode()
    assert 'title="pending approvals">1<' in index


def test_prometheus_lines_for_a_session_are_alpha_s_and_the_bearer_token_s_name_each_workspace(client, world, settings):
    a, b = world
    member(client, a.workspace, role=Role.OPERATOR)
    text = client.get("/metrics").content.decode()
    alpha_finished = 'agent="alpha-agent",status="completed",stop_reason="final_answer",workspace="default"'
    assert alpha_finished in text
    assert "bravo" not in text
    assert "agentry_approvals_pending 1.0" in text
    settings.AGENTRY_METRICS_TOKEN = "scrape-token"
    client.logout()
    everything = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token").content.decode()
    assert 'agent="bravo-agent",status="completed",stop_reason="final_answer",workspace="bravo"' in everything
    assert alpha_finished in everything
    assert "agentry_approvals_pending 2.0" in everything


def test_bravo_s_urls_are_404_for_a_member_of_alpha(client, world):
    a, b = world
    member(client, a.workspace, role=Role.OPERATOR)
    for url in [
        reverse("monitoring:agent", args=[b.agent.slug]),
        reverse("monitoring:playground", args=[b.agent.slug]),
        reverse("monitoring:run", args=[b.parked.pk]),
        reverse("monitoring:run-json", args=[b.parked.pk]),
        reverse("monitoring:run-events", args=[b.parked.pk]),
        reverse("monitoring:run-compare", args=[b.ended.pk]),
        reverse("approvals:detail", args=[b.approval.pk]),
        reverse("evals:compare") + f"?baseline={b.eval_run.pk}&candidate={a.eval_run.pk}",
        f"/api/v1/runs/{b.parked.pk}/events/",
    ]:
        assert client.get(url).status_code == 404, url
    for url, data in [
        (reverse("approvals:decision", args=[b.approval.pk]), {"decision": "approve"}),
        (reverse("approvals:preview", args=[b.approval.pk]), {}),
        (reverse("monitoring:run-action", args=[b.parked.pk, "cancel"]), {}),
        (reverse("monitoring:try-send"), {"agent": b.agent.pk, "content": "hi"}),
        (reverse("monitoring:playground-send", args=[b.agent.slug]), {"content": "hi"}),
        (reverse("workspace-switch"), {"workspace": b.workspace.pk, "next": "/monitor/"}),
    ]:
        assert client.post(url, data).status_code == 404, url
    b.approval.refresh_from_db()
    b.parked.refresh_from_db()
    assert b.approval.status == Approval.Status.PENDING and b.parked.status == "awaiting_approval"


def test_the_switcher_offers_only_the_member_s_workspaces_and_a_member_of_both_switches(client, world):
    a, b = world
    member(client, a.workspace, role=Role.OPERATOR, name="alpha-only")
    header = client.get(reverse("monitoring:dashboard")).content.decode()
    assert "Alpha team" in header and "Bravo team" not in header

    both = member(client, a.workspace, b.workspace, role=Role.OPERATOR, name="both")
    dashboard = client.get(reverse("monitoring:dashboard")).content.decode()
    assert 'class="workspace-switcher"' in dashboard
    assert "Alpha team" in dashboard and "Bravo team" in dashboard
    switched = client.post(reverse("workspace-switch"), {"workspace": b.workspace.pk, "next": "/monitor/?hours=6"})
    assert switched.status_code == 302 and switched["Location"] == "/monitor/?hours=6"
    assert client.session[SESSION_KEY] == b.workspace.pk
    data = client.get(reverse("monitoring:data")).content.decode()
    assert "bravo-agent-name" in data and "alpha-agent-name" not in data
    assert client.get(reverse("monitoring:run", args=[b.parked.pk])).status_code == 200
    assert client.get(reverse("monitoring:run", args=[a.parked.pk])).status_code == 404
    assert client.get(reverse("monitoring:agent", args=[b.agent.slug])).status_code == 200
    assert client.get(reverse("monitoring:agent", args=[a.agent.slug])).status_code == 404
    assert [card["id"] for card in client.get(reverse("approvals:poll")).json()["cards"]] == [b.approval.pk]
    # The session's event stream follows the switch (an ended run with no events answers 204).
    assert client.get(f"/api/v1/runs/{b.ended.pk}/events/").status_code == 204
    assert client.get(f"/api/v1/runs/{a.ended.pk}/events/").status_code == 404
    # From a page of one object, the switch lands on the admin's index; elsewhere, never off-site.
    for target in [reverse("monitoring:run", args=[b.parked.pk]), "https://evil.example/", "//evil.example/x"]:
        back = client.post(reverse("workspace-switch"), {"workspace": a.workspace.pk, "next": target})
        assert back["Location"] == reverse("admin:index"), target
    assert both.memberships.count() == 2


def test_a_superuser_chooses_every_workspace_or_all_of_them(client, world):
    a, b = world
    boss = User.objects.create_superuser("boss", password="pw")
    client.force_login(boss)
    header = client.get(reverse("admin:index")).content.decode()
    assert "All workspaces" in header and "Alpha team" in header and "Bravo team" in header
    data = client.get(reverse("monitoring:data")).content.decode()
    assert "alpha-agent-name" in data and "bravo-agent-name" in data
    client.post(reverse("workspace-switch"), {"workspace": b.workspace.pk})
    data = client.get(reverse("monitoring:data")).content.decode()
    assert "bravo-agent-name" in data and "alpha-agent-name" not in data
    client.post(reverse("workspace-switch"), {"workspace": "all"})
    assert SESSION_KEY not in client.session


def test_the_switch_refuses_bad_input(client, world):
    a, b = world
    assert client.post(reverse("workspace-switch"), {"workspace": a.workspace.pk}).status_code == 302  # to login
    member(client, a.workspace, role=Role.VIEWER)
    assert client.get(reverse("workspace-switch")).status_code == 405
    for value in ["", "x", "all", "999999"]:
        assert client.post(reverse("workspace-switch"), {"workspace": value}).status_code == 404, value


def test_an_approver_opens_the_queue_but_not_monitoring(client, world):
    a, b = world
    member(client, a.workspace, role=Role.APPROVER)
    assert client.get(reverse("approvals:queue")).status_code == 200
    assert client.get(reverse("approvals:detail", args=[a.approval.pk])).status_code == 200
    assert client.get(reverse("monitoring:dashboard")).status_code == 403
    assert client.get(reverse("monitoring:run", args=[a.parked.pk])).status_code == 403
    decided = client.post(reverse("approvals:decision", args=[a.approval.pk]), {"decision": "reject", "reason": "no"})
    assert decided.status_code == 302
    a.approval.refresh_from_db()
    assert a.approval.status == Approval.Status.REJECTED


def test_a_viewer_reads_monitoring_but_cannot_decide_cancel_or_retry(client, world):
    a, b = world
    member(client, a.workspace, role=Role.VIEWER)
    assert client.get(reverse("monitoring:dashboard")).status_code == 200
    assert client.get(reverse("monitoring:run", args=[a.parked.pk])).status_code == 200
    assert client.get(reverse("approvals:queue")).status_code == 403
    assert client.post(reverse("approvals:decision", args=[a.approval.pk]), {"decision": "approve"}).status_code == 403
    for action in ("cancel", "retry", "requeue"):
        assert client.post(reverse("monitoring:run-action", args=[a.parked.pk, action])).status_code == 403
    assert client.post(reverse("monitoring:try-send"), {"agent": a.agent.pk, "content": "hi"}).status_code == 403
    a.approval.refresh_from_db()
    a.parked.refresh_from_db()
    assert a.approval.status == Approval.Status.PENDING and a.parked.status == "awaiting_approval"


def test_the_run_json_of_an_operator_names_alpha_s_run(client, world):
    a, b = world
    member(client, a.workspace, role=Role.OPERATOR)
    timeline = json.loads(client.get(reverse("monitoring:run-json", args=[a.parked.pk])).content)
    assert timeline["run"]["id"] == str(a.parked.pk)


def test_the_run_export_action_leaves_out_bravo_s_runs(client, world):
    a, b = world
    member(client, a.workspace, role=Role.OPERATOR)
    response = client.post(
        reverse("admin:conversations_run_changelist"),
        {"action": "export_runs_jsonl", "_selected_action": [str(a.ended.pk), str(b.ended.pk)]},
    )
    assert response.status_code == 200
    lines = b"".join(response).decode()
    assert str(a.ended.pk) in lines and str(b.ended.pk) not in lines and "bravo" not in lines
