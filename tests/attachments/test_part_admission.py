"""The one check of what a run's models can be sent (engine.admission_parts): each part is taken
by the agent's model and its fallback, or turned into text as the agent says, or the post is
refused with a 400 that names the part and what the model takes; nothing is written then."""

import pytest
from django.core.exceptions import ValidationError
from rest_framework.views import APIView

from agents.models import Agent, ModelConfig, ModelPurpose
from agents.services import agent_version_current
from agents.snapshot import snapshot_build
from attachments.services import attachment_store
from conversations.models import Conversation, Run
from conversations.services import conversation_create
from engine.admission import conversation_start, message_submit
from engine.admission_parts import PartNotTaken
from platform_site.api_errors import api_exception_handler
from tests.attachments import samples
from tests.support.factories import ModelConfigFactory, make_agent, make_user

pytestmark = pytest.mark.django_db

SAMPLES = {
    "image": (samples.png, "photo.png"),
    "audio": (samples.wav, "note.wav"),
    "file": (samples.docx, "order.docx"),
}
CONVERSIONS = {
    "image": {"image_parts": "ocr"},
    "audio": {"audio_parts": "transcribe"},
    "file": {"file_parts": "extract"},
}


def _post(agent, kind, owner=None):
    owner = owner or make_user()
    data, name = SAMPLES[kind]
    attachment = attachment_store(
        workspace=agent.workspace, uploaded_by=owner, owner=owner, end_user="", data=data(), name=name
    )
    assert attachment.kind == kind
    conversation = conversation_create(agent=agent, owner=owner)
    return message_submit(conversation=conversation, content="look", user=owner, attachments=[attachment]).run


def _with(kind: str, **fields):
    if kind == "audio":
        fields["transcription_model_config"] = ModelConfigFactory(purpose=ModelPurpose.TRANSCRIPTION)
    return make_agent(**CONVERSIONS[kind], **fields)


@pytest.mark.parametrize("kind", ["image", "audio", "file"])
def test_a_part_the_model_does_not_take_is_refused_and_nothing_is_written(stored, kind):
    agent = make_agent()
    runs = Run.objects.count()
    with pytest.raises(PartNotTaken) as refused:
        _post(agent, kind)
    assert refused.value.code == "input_kind"
    assert SAMPLES[kind][1] in str(refused.value) and "it takes: text" in str(refused.value)
    assert Run.objects.count() == runs


@pytest.mark.parametrize("kind", ["image", "audio", "file"])
def test_a_part_the_agent_turns_into_text_is_admitted(stored, kind):
    run = _post(_with(kind), kind)
    [message] = run.messages.all()
    assert [part["type"] for part in message.parts] == [kind]


def test_a_part_the_model_takes_needs_no_conversion(stored):
    agent = make_agent(model_config=ModelConfigFactory(input_kinds=["text", "image"]))
    assert _post(agent, "image").pk


def test_the_fallback_must_take_the_part_too_or_it_is_converted(stored):
    seeing = ModelConfigFactory(input_kinds=["text", "image"])
    blind = ModelConfigFactory()
    agent = make_agent(model_config=seeing, fallback_model_config=blind)
    with pytest.raises(PartNotTaken):
        _post(agent, "image")
    agent = make_agent(model_config=seeing, fallback_model_config=blind, image_parts="ocr")
    assert _post(agent, "image").pk


def test_a_chat_completion_with_a_refused_part_leaves_no_conversation(stored):
    agent, owner = make_agent(), make_user()
    attachment = attachment_store(
        workspace=agent.workspace, uploaded_by=owner, owner=owner, end_user="", data=samples.wav(), name="a.wav"
    )
    conversations = Conversation.objects.count()
    with pytest.raises(PartNotTaken):
        conversation_start(agent=agent, user=owner, content="hi", attachments=[attachment])
    assert Conversation.objects.count() == conversations


def test_the_api_answers_a_refused_part_with_400():
    response = api_exception_handler(PartNotTaken("input_kind", "The attachment is audio."), {"view": APIView()})
    assert response.status_code == 400
    assert response.data == {"message": "The attachment is audio.", "extra": {}}


def test_a_conversion_names_a_model_config_that_can_do_it():
    chat = ModelConfigFactory()
    agent = make_agent()
    agent.audio_parts = "transcribe"
    with pytest.raises(ValidationError) as problems:
        agent.clean()
    assert "transcription_model_config" in problems.value.message_dict
    agent.transcription_model_config = chat
    with pytest.raises(ValidationError) as problems:
        agent.clean()
    assert "transcription_model_config" in problems.value.message_dict
    agent.audio_parts, agent.transcription_model_config = "refuse", None
    agent.image_parts, agent.description_model_config = "describe", chat
    with pytest.raises(ValidationError) as problems:
        agent.clean()
    assert "description_model_config" in problems.value.message_dict
    agent.description_model_config = ModelConfigFactory(input_kinds=["text", "image"])
    agent.clean()


def test_an_agent_without_conversions_pins_the_snapshot_it_pinned_before():
    agent = make_agent()
    assert "conversions" not in snapshot_build(agent=agent)
    agent.image_parts = "ocr"
    assert snapshot_build(agent=agent)["conversions"] == {"kinds": {"image": "ocr"}}


def test_a_change_to_the_transcription_model_pins_a_new_version():
    transcriber = ModelConfigFactory(purpose=ModelPurpose.TRANSCRIPTION)
    agent = make_agent(audio_parts="transcribe", transcription_model_config=transcriber)
    first = agent_version_current(agent=agent)
    assert first.snapshot["conversions"]["transcription_model"]["purpose"] == "transcription"
    assert agent_version_current(agent=agent).pk == first.pk
    ModelConfig.objects.filter(pk=transcriber.pk).update(price_audio_per_minute="0.006")
    changed = agent_version_current(agent=Agent.objects.get(pk=agent.pk))
    assert changed.pk != first.pk
    assert changed.snapshot["conversions"]["transcription_model"]["price_audio_per_minute"] == "0.006"
