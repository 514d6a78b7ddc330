"""An agent's online scores page: each evaluator's daily average per version over 30 days as
an SVG line chart, the latest scores linked to their runs' timelines; another workspace's agent
is a 404, and the page takes the permission to read online scores."""

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from agents.releases import version_publish
from agents.services import agent_version_current
from conversations.models import Message
from evals.models import OnlineEvaluator, OnlineScore
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.ledger import ledger_run
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


def online_url(agent) -> str:
    return reverse("monitoring:agent-online", args=[agent.slug])


@pytest.fixture
def reader(staff):
    staff.user_permissions.add(Permission.objects.get(codename="view_onlinescore", content_type__app_label="evals"))
    return staff


def _score(evaluator, version, value, *, days_ago: int, explanation: str = "") -> OnlineScore:
    run = ledger_run(evaluator.agent)
    row = OnlineScore.objects.create(
        evaluator=evaluator, run=run, agent_version=version, reason="sample", score=value, explanation=explanation
    )
    OnlineScore.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(days=days_ago))
    return row


def test_each_evaluator_s_daily_average_per_version_and_the_latest_scores(client, reader):
    agent = make_agent(name="Weather desk", slug="weather-desk")
    v1 = agent_version_current(agent=agent)
    version_publish(agent=agent, user=reader, note="first")
    agent.refresh_from_db()
    agent.system_prompt = "Be brief."
    agent.save()
    v2 = agent_version_current(agent=agent)
    tone = OnlineEvaluator.objects.create(agent=agent, name="tone", kind="judge", sample_rate=0.1)
    schema = OnlineEvaluator.objects.create(agent=agent, name="schema", kind="schema")
    _score(tone, v1, 1.0, days_ago=3)
    _score(tone, v1, 0.5, days_ago=3)
    _score(tone, v1, 0.0, days_ago=40)  # older than the chart's 30 days
    _score(tone, v2, None, days_ago=1, explanation="the judge call failed: boom")
    latest = _score(tone, v2, 0.25, days_ago=0, explanation="too curt")

    response = client.get(online_url(agent))
    assert response.status_code == 200
    text = response.content.decode()
    tone_section = text[text.index(f'data-evaluator="{tone.pk}"') :].split("</section>")[0]
    # One line per version; a point per day with scores, its average and count in its title.
    assert tone_section.count("<polyline") == 2
    titles = re.findall(r"<title>([^<]+)</title>", tone_section)
    day = (timezone.localdate() - timedelta(days=3)).isoformat()
    assert f"{day} · v1: 0.75 over 2 scores" in titles
    assert any(title.endswith("v2: 0.25 over 1 scores") for title in titles)
    assert len(titles) == 2
    schema_section = text[text.index(f'data-evaluator="{schema.pk}"') :].split("</section>")[0]
    assert "no scores in this window" in schema_section and "<polyline" not in schema_section
    # The latest scores, each linked to its run's timeline.
    recent = text[text.index('id="online-recent"') :]
    assert reverse("monitoring:run", args=[latest.run_id]) in recent
    assert "too curt" in recent and "the judge call failed: boom" in recent
    # The agent's page links here.
    assert online_url(agent) in client.get(reverse("monitoring:agent", args=[agent.slug])).content.decode()


def test_another_workspace_s_agent_and_scores_are_a_404(client, reader):
    bravo = Workspace.objects.create(name="Bravo", slug="bravo")
    theirs = make_agent(
        name="Bravo agent", slug="bravo-agent", workspace=bravo, model_config=ModelConfigFactory(workspace=bravo)
    )
    evaluator = OnlineEvaluator.objects.create(agent=theirs, name="theirs", kind="regex", config={"pattern": "."})
    _score(evaluator, None, 0.5, days_ago=0)
    assert client.get(online_url(theirs)).status_code == 404
    mine = make_agent(name="Mine", slug="mine")
    text = client.get(online_url(mine)).content.decode()
    assert "theirs" not in text and 'id="online-none"' in text


def test_reading_online_scores_takes_its_permission(client, staff):
    agent = make_agent(slug="weather-desk")
    assert client.get(online_url(agent)).status_code == 403


def test_the_latest_scores_show_their_runs_attachments(client, reader):
    reader.user_permissions.add(
        Permission.objects.get(codename="view_attachment", content_type__app_label="attachments")
    )
    agent = make_agent(slug="weather-desk")
    evaluator = OnlineEvaluator.objects.create(agent=agent, name="tone", kind="regex", config={"pattern": "."})
    image = str(uuid.uuid4())
    score = _score(evaluator, None, 1.0, days_ago=0)
    Message.objects.create(
        conversation_id=score.run.conversation_id,
        run_id=score.run_id,
        order=1,
        role="user",
        content="what is broken here?",
        parts=[
            {"type": "image", "attachment": image, "media_type": "image/png", "name": "mug.png", "size": 2048},
            {"type": "file", "attachment": str(uuid.uuid4()), "media_type": "application/pdf", "name": "r.pdf"},
        ],
    )
    recent = client.get(online_url(agent)).content.decode().split('id="online-recent"')[1]
    assert f'<img class="attachment-thumb" src="{reverse("monitoring:attachment-download", args=[image])}"' in recent
    assert 'class="attachment-chip" data-type="file"' in recent and "r.pdf" in recent
