"""Parts the agent's model does not take, turned into text by the pre-step, through the real
worker and the fake model server: a voice note transcribed (an LLMCall of purpose transcription,
priced by the minute), a scanned page read by OCR and a Word file's text extracted in the limited
child; the text is what the model is sent, kept as a PartText, and screened by the input
guardrails like typed text."""

import struct
from decimal import Decimal

import pytest

from agents.models import GuardrailRule, ModelPurpose
from attachments.models import PartText
from attachments.services import attachment_store
from conversations.events import EventType
from conversations.models import LLMCall, RunEvent, RunStatus
from conversations.services import conversation_create
from engine.admission import message_submit
from knowledge.format_set import _docx, scan_png
from tests.attachments import samples
from tests.support.factories import ModelConfigFactory, make_user
from tests.support.llm import agent_on, assert_totals_match_calls, fake_model
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

SCRIPT = {"scenarios": [{"match": ".", "steps": [{"content": "noted"}]}]}


def said_wav(text: str, seconds: float = 3.0) -> bytes:
    """A WAV clip the fake server transcribes as `text` (fakellm.transcriptions: its `say ` chunk)."""
    clip = samples.wav(seconds=seconds)
    payload = text.encode()
    chunk = b"say " + struct.pack("<I", len(payload)) + payload + (b"\x00" if len(payload) % 2 else b"")
    clip += chunk
    return clip[:4] + struct.pack("<I", len(clip) - 8) + clip[8:]


def _transcriber(fake_llm, **fields):
    fields = {"model": "whisper-1", "price_audio_per_minute": "0.006", **fields}
    return ModelConfigFactory(base_url=fake_llm.api_base, purpose=ModelPurpose.TRANSCRIPTION, **fields)


def _run(agent, data: bytes, name: str, content: str = "see attached"):
    owner = make_user()
    attachment = attachment_store(
        workspace=agent.workspace, uploaded_by=owner, owner=owner, end_user="", data=data, name=name
    )
    conversation = conversation_create(agent=agent, owner=owner)
    run = message_submit(conversation=conversation, content=content, user=owner, attachments=[attachment]).run
    ended = wait_for(
        lambda: run.__class__.objects.filter(pk=run.pk, status__in=["completed", "failed"]).first(),
        timeout=120,
        message=f"run {run.pk} to end",
    )
    return ended, attachment


def _sent_text(run) -> list:
    step = LLMCall.objects.get(run=run, purpose=LLMCall.Purpose.STEP, status="succeeded")
    return step.request["messages"][-1]["content"]


def test_a_voice_note_is_transcribed_before_the_step(worker, fake_llm):
    agent = agent_on(fake_llm, SCRIPT, tools=[], audio_parts="transcribe")
    agent.transcription_model_config = _transcriber(fake_llm)
    agent.save()
    run, attachment = _run(agent, said_wav("my order 4417 never arrived"), "note.wav")
    assert (run.status, run.stop_reason) == (RunStatus.COMPLETED, "final_answer"), run.error
    assert _sent_text(run) == [
        {"type": "text", "text": "see attached"},
        {"type": "text", "text": "[audio note.wav, transcription]\nmy order 4417 never arrived"},
    ]
    call = LLMCall.objects.get(run=run, purpose=LLMCall.Purpose.TRANSCRIPTION)
    assert call.status == "succeeded" and call.request["file"] == f"attachment:{attachment.pk}"
    assert call.total_tokens == 0 and call.cost == Decimal("0.006") * 3 / 60
    text = PartText.objects.get(attachment=attachment)
    assert (text.method, text.text, text.run_id, text.llm_call_id) == (
        "transcription",
        "my order 4417 never arrived",
        run.pk,
        call.pk,
    )
    [event] = RunEvent.objects.filter(run=run, type=EventType.PART_CONVERTED)
    assert event.payload["method"] == "transcription" and event.payload["llm_call_id"] == call.pk
    assert_totals_match_calls(run)


def test_a_transcription_server_that_fails_ends_the_run_saying_which_part(worker, fake_llm):
    agent = agent_on(fake_llm, SCRIPT, tools=[], audio_parts="transcribe")
    agent.transcription_model_config = _transcriber(fake_llm, model="unavailable-whisper", max_retries=1)
    agent.save()
    run, _attachment = _run(agent, samples.wav(), "note.wav")
    assert (run.status, run.stop_reason) == (RunStatus.FAILED, "provider_error")
    assert "note.wav" in run.error and "could not be turned into text" in run.error
    attempts = LLMCall.objects.filter(run=run, purpose=LLMCall.Purpose.TRANSCRIPTION)
    assert [c.status for c in attempts.order_by("attempt")] == ["failed", "failed"]
    assert not LLMCall.objects.filter(run=run, purpose=LLMCall.Purpose.STEP).exists()


def test_a_scanned_page_is_read_by_ocr_in_the_limited_child(worker, fake_llm):
    agent = agent_on(fake_llm, SCRIPT, tools=[], image_parts="ocr")
    run, attachment = _run(agent, scan_png(["Order 4417", "订单 已发货"]), "scan.png")
    assert run.status == RunStatus.COMPLETED, run.error
    text = PartText.objects.get(attachment=attachment, method="ocr")
    assert "4417" in text.text and text.llm_call_id is None
    sent = _sent_text(run)
    assert sent[1]["text"].startswith("[image scan.png, ocr]\n") and "4417" in sent[1]["text"]
    assert not LLMCall.objects.filter(run=run).exclude(purpose=LLMCall.Purpose.STEP).exists()


def test_a_word_file_is_extracted_and_a_blocked_phrase_in_it_blocks_the_run(worker, fake_llm):
    agent = agent_on(fake_llm, SCRIPT, tools=[], file_parts="extract")
    document = _docx("Refund request", [("Details", ["Please refund order 4417."])])
    run, attachment = _run(agent, document, "refund.docx")
    assert run.status == RunStatus.COMPLETED, run.error
    assert "refund order 4417" in PartText.objects.get(attachment=attachment, method="extraction").text
    assert "[file refund.docx, extraction]" in _sent_text(run)[1]["text"]

    GuardrailRule.objects.create(agent=agent, side="input", kind="blocked_terms", terms="4417", action="block")
    blocked, _attachment = _run(agent, document, "refund.docx")
    assert (blocked.status, blocked.stop_reason) == (RunStatus.COMPLETED, "guardrail_blocked")
    assert not LLMCall.objects.filter(run=blocked, purpose=LLMCall.Purpose.STEP).exists()
    assert blocked.guardrail_triggers.filter(side="input", action="block").exists()


def test_a_redacting_rule_redacts_a_transcript_as_typed_text(worker, fake_llm):
    agent = agent_on(fake_llm, SCRIPT, tools=[], audio_parts="transcribe")
    agent.transcription_model_config = _transcriber(fake_llm)
    agent.save()
    GuardrailRule.objects.create(agent=agent, side="input", kind="pii_email", action="redact")
    run, _attachment = _run(agent, said_wav("write to ann@example.com please"), "note.wav")
    assert run.status == RunStatus.COMPLETED, run.error
    sent = _sent_text(run)[1]["text"]
    assert "ann@example.com" not in sent and sent.startswith("[audio note.wav, transcription]\nwrite to ")


def test_an_image_is_described_by_a_model_that_sees_it(worker, fake_llm):
    describer = fake_model(
        fake_llm,
        {"scenarios": [{"match": ".", "steps": [{"content": "A red square on white."}]}]},
        input_kinds=["text", "image"],
    )
    agent = agent_on(fake_llm, SCRIPT, tools=[], image_parts="describe", description_model_config=describer)
    run, attachment = _run(agent, samples.png(), "photo.png")
    assert run.status == RunStatus.COMPLETED, run.error
    call = LLMCall.objects.get(run=run, purpose=LLMCall.Purpose.DESCRIPTION)
    assert call.model_config_id == describer.pk and call.status == "succeeded"
    # The ledger holds the image by reference, never its bytes.
    assert str(attachment.pk) in str(call.request) and "base64," not in str(call.request)
    text = PartText.objects.get(attachment=attachment, method="description")
    assert (text.text, text.llm_call_id) == ("A red square on white.", call.pk)
    assert _sent_text(run)[1] == {"type": "text", "text": "[image photo.png, description]\nA red square on white."}
    assert_totals_match_calls(run)
