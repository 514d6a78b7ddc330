"""The text a part was turned into (PartText) points at the run and the model call that made it:
purging that run, or forgetting the end user, never fails on it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from attachments.models import Attachment, PartText
from conversations.end_users import EndUser
from conversations.models import LLMCall, Run
from engine.retention import retention_sweep
from memory.forget import end_user_forget
from tests.attachments import samples
from tests.attachments.test_retention import _sent, _store
from tests.support.factories import make_agent, make_user
from tests.support.ledger import ledger_run

pytestmark = pytest.mark.django_db
LONG_AGO = timezone.now() - timedelta(days=30)


def _transcribed(run, attachment) -> PartText:
    call = LLMCall.objects.create(
        run=run,
        iteration=1,
        attempt=1,
        purpose=LLMCall.Purpose.TRANSCRIPTION,
        provider="openai_compatible",
        request={},
        model_config=run.agent.model_config,
    )
    return PartText.objects.create(attachment=attachment, method="transcription", text="hello", run=run, llm_call=call)


def test_purging_the_run_that_made_a_part_text_never_fails_on_it(stored, django_capture_on_commit_callbacks):
    agent, owner = make_agent(retention_days=7), make_user()
    attachment = _store(owner, samples.wav(), name="note.wav", agent=agent)
    run = ledger_run(agent, created_at=LONG_AGO, finished_at=LONG_AGO)
    _sent(run, attachment)
    text = _transcribed(run, attachment)
    with django_capture_on_commit_callbacks(execute=True):
        summary = retention_sweep()
    assert summary["purged"][agent.slug]["runs"] == 1
    assert not Run.objects.exists() and not LLMCall.objects.exists()
    # The text stays with its attachment (the daily sweep takes both once unused long enough),
    # no longer pointing at what was purged.
    text.refresh_from_db()
    assert (text.run_id, text.llm_call_id, text.text) == (None, None, "hello")
    assert Attachment.objects.filter(pk=attachment.pk).exists()


def test_forgetting_an_end_user_takes_the_text_of_their_parts(stored, django_capture_on_commit_callbacks):
    agent, owner = make_agent(), make_user()
    attachment = _store(owner, samples.wav(), end_user="eu-1", name="note.wav", agent=agent)
    run = ledger_run(agent)
    _sent(run, attachment, end_user="eu-1")
    _transcribed(run, attachment)
    with django_capture_on_commit_callbacks(execute=True):
        end_user_forget(person=EndUser(owner.pk, "eu-1"), requested_by=owner, channel="api")
    assert not PartText.objects.exists() and not Attachment.objects.exists()
