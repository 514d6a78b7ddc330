"""A run's timeline with attachments: the user message's image as a thumbnail from the console's
download (for those who may download) and a file as a chip with its type and size, the image and
audio tokens of each model call, and the pre-steps (what was turned into text, how, by which
call); one query more than a text-only run, and none more for a text-only run."""

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from attachments.models import Attachment, PartText
from attachments.parts import parts_of
from conversations.models import LLMCall, Message
from tests.support.factories import make_agent
from tests.support.ledger import ledger_call, ledger_run
from workspaces.defaults import default_workspace_id

pytestmark = pytest.mark.django_db


def _attachment(owner, **fields) -> Attachment:
    defaults = {
        "kind": "image",
        "media_type": "image/png",
        "size": 2048,
        "sha256": fields.pop("sha256", "a" * 64),
        "width": 40,
        "height": 30,
        "name": "mug.png",
    }
    defaults["storage_key"] = defaults["sha256"]
    return Attachment.objects.create(workspace_id=default_workspace_id(), owner=owner, **{**defaults, **fields})


def _run_with_attachments(owner):
    agent = make_agent()
    run = ledger_run(agent, finished_at=timezone.now())
    image = _attachment(owner)
    audio = _attachment(
        owner,
        kind="audio",
        media_type="audio/wav",
        size=3_000_000,
        width=None,
        height=None,
        duration_ms=2500,
        name="note.wav",
        sha256="b" * 64,
    )
    Message.objects.create(
        conversation=run.conversation,
        run=run,
        role="user",
        order=1,
        content="what is broken?",
        parts=parts_of([image, audio]),
    )
    transcription = ledger_call(run, started_at=timezone.now(), iteration=1)
    LLMCall.objects.filter(pk=transcription.pk).update(purpose=LLMCall.Purpose.TRANSCRIPTION)
    step = ledger_call(run, started_at=timezone.now(), iteration=1)
    LLMCall.objects.filter(pk=step.pk).update(image_tokens=85, audio_tokens=0)
    PartText.objects.create(
        attachment=audio, method="transcription", text="the handle came off", run=run, llm_call=transcription
    )
    return run, image, audio, transcription


def _queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_timeline_shows_thumbnails_chips_media_tokens_and_pre_steps(client, staff):
    staff.user_permissions.add(Permission.objects.get(codename="view_attachment"))
    run, image, audio, transcription = _run_with_attachments(staff)
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()

    question = page[page.index('id="run-question-parts"') :]
    download = reverse("monitoring:attachment-download", args=[image.pk])
    assert f'<img class="attachment-thumb" src="{download}" alt="mug.png"' in question
    chip = question[question.index('data-type="audio"') : question.index("</span>")]
    assert "note.wav" in chip and "audio/wav" in chip and "2.9\xa0MB" in chip and "2.5 s" in chip
    assert "of the prompt: images 85 · audio 0" in page
    texts = page[page.index('id="part-texts"') :]
    assert "the handle came off" in texts and "transcription" in texts
    assert f'<a href="#llm-call-{transcription.pk}">step 1</a>' in texts and f'id="llm-call-{transcription.pk}"' in page

    data = client.get(reverse("monitoring:run-json", args=[run.pk])).json()
    assert [part["name"] for part in data["run"]["question_parts"]] == ["mug.png", "note.wav"]
    assert [step["image_tokens"] for step in data["steps"]] == [0, 85]
    assert data["part_texts"][0]["llm_call_id"] == transcription.pk


def test_without_the_download_permission_the_parts_are_chips_without_links(client, staff):
    run, image, _audio, _call = _run_with_attachments(staff)
    page = client.get(reverse("monitoring:run", args=[run.pk])).content.decode()
    assert "attachment-thumb" not in page
    assert reverse("monitoring:attachment-download", args=[image.pk]) not in page
    assert "mug.png · image/png · 2.0\xa0KB · 40×30" in page


def test_attachments_cost_one_query_and_a_text_only_run_none(client, staff):
    staff.user_permissions.add(Permission.objects.get(codename="view_attachment"))
    with_parts, *_ = _run_with_attachments(staff)
    text_only = ledger_run(make_agent(), finished_at=timezone.now())
    Message.objects.create(conversation=text_only.conversation, run=text_only, role="user", order=1, content="hi")
    for _ in range(2):
        ledger_call(text_only, started_at=timezone.now())
    _queries(client, reverse("monitoring:run", args=[text_only.pk]))  # warm: the session, the permissions
    plain = _queries(client, reverse("monitoring:run", args=[text_only.pk]))
    rich = _queries(client, reverse("monitoring:run", args=[with_parts.pk]))
    assert rich <= plain + 1, (plain, rich)
    with CaptureQueriesContext(connection) as queries:
        client.get(reverse("monitoring:run", args=[text_only.pk]))
    assert not any("attachments_parttext" in query["sql"] for query in queries.captured_queries)
