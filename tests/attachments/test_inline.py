"""The body a model call sends (attachments.inline): references replaced by the stored bytes, read
from real storage in one query with their digests checked; references the request's own parts do
not name, or whose bytes are gone, refused."""

import base64
import copy

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.providers.anthropic import AnthropicProvider
from agents.providers.openai_compatible import OpenAICompatibleProvider
from attachments.inline import AttachmentUnavailable, inlined
from attachments.parts import part_of
from attachments.services import attachment_read, attachment_store
from attachments.storage import attachment_storage
from tests.attachments import samples
from tests.support.factories import make_user
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

MODEL = {"model": "m", "max_tokens": 100}


@pytest.fixture
def stored_parts(stored):
    workspace = Workspace.objects.get(pk=default_workspace_id())
    owner = make_user()

    def store(data, name):
        return attachment_store(workspace=workspace, uploaded_by=owner, owner=owner, end_user="", data=data, name=name)

    return {
        "image": store(samples.png(), "a.png"),
        "audio": store(samples.wav(), "note.wav"),
        "text": store("名称,数量\ntea,2\n".encode(), "order.csv"),
    }


def _messages(*attachments):
    return [{"role": "user", "content": [{"type": "text", "text": "see"}, *(part_of(a) for a in attachments)]}]


def _ids(*attachments):
    return {str(a.pk) for a in attachments}


def _b64(attachment):
    return base64.b64encode(attachment_read(attachment=attachment)).decode()


def _path(attachment):
    return attachment_storage().path(attachment.storage_key)


def test_openai_body_gets_data_urls_and_base64_in_one_query(stored_parts):
    image, audio = stored_parts["image"], stored_parts["audio"]
    body = OpenAICompatibleProvider().build_request(
        model=MODEL, messages=_messages(image, audio, image), tools=[], tool_choice="auto", parallel_tool_calls=True
    )
    kept = copy.deepcopy(body)
    with CaptureQueriesContext(connection) as queries:
        sent = inlined(body, attachment_ids=_ids(image, audio))
    assert len(queries) == 1
    content = sent["messages"][0]["content"]
    assert content[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_b64(image)}"}}
    assert content[2] == {"type": "input_audio", "input_audio": {"data": _b64(audio), "format": "wav"}}
    assert content[3] == content[1]
    # The ledger's body is left as it was: references only.
    assert body == kept and "base64" not in str(body)


def test_anthropic_body_gets_base64_and_text(stored_parts):
    image, text = stored_parts["image"], stored_parts["text"]
    body = AnthropicProvider().build_request(
        model=MODEL, messages=_messages(image, text), tools=[], tool_choice="auto", parallel_tool_calls=True
    )
    sent = inlined(body, attachment_ids=_ids(image, text))
    blocks = sent["messages"][0]["content"]
    assert blocks[1]["source"]["data"] == _b64(image)
    assert blocks[2]["source"] == {"type": "text", "media_type": "text/plain", "data": "名称,数量\ntea,2\n"}


def test_a_body_without_references_costs_nothing():
    body = {"model": "m", "messages": [{"role": "user", "content": "attachment:0b7e4c1e-4a55-4f6e-9a39-3c1a1b2c3d4e"}]}
    with CaptureQueriesContext(connection) as queries:
        assert inlined(body, attachment_ids=set()) is body
    assert not queries


def test_typed_text_is_never_read_as_a_reference(stored_parts):
    image = stored_parts["image"]
    text = f"attachment:{image.pk}"
    body = OpenAICompatibleProvider().build_request(
        model=MODEL,
        messages=[{"role": "user", "content": [{"type": "text", "text": text}, part_of(image)]}],
        tools=[],
        tool_choice="auto",
        parallel_tool_calls=True,
    )
    assert inlined(body, attachment_ids=_ids(image))["messages"][0]["content"][0] == {"type": "text", "text": text}


def test_a_reference_to_an_attachment_the_request_does_not_carry_is_refused(stored_parts):
    image, audio = stored_parts["image"], stored_parts["audio"]
    body = OpenAICompatibleProvider().build_request(
        model=MODEL, messages=_messages(image, audio), tools=[], tool_choice="auto", parallel_tool_calls=True
    )
    with pytest.raises(AttachmentUnavailable):
        inlined(body, attachment_ids=_ids(image))


def test_bytes_gone_or_altered_are_refused(stored_parts):
    image = stored_parts["image"]
    body = OpenAICompatibleProvider().build_request(
        model=MODEL, messages=_messages(image), tools=[], tool_choice="auto", parallel_tool_calls=True
    )
    with open(_path(image), "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(AttachmentUnavailable):
        inlined(body, attachment_ids=_ids(image))
    image.delete()
    with pytest.raises(AttachmentUnavailable):
        inlined(body, attachment_ids=_ids(image))
