"""A message with an image, a file and an audio clip through the real worker, once per wire
format, to the fake server's echo script: the answer names each part as the server decoded it,
the ledger's request holds references and never the bytes, the call's image and audio tokens
follow the provider's rule (the server's own count) and its cost prices them. In process: what a
step with an image costs the database beside a text step."""

from decimal import Decimal
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from attachments.services import attachment_store
from conversations.models import Conversation, LLMCall, Message, Run
from engine.admission import message_submit
from engine.loop import run_advance
from fakellm import parts as fake_rules
from tests.attachments import samples
from tests.support.factories import ModelConfigFactory, make_agent, make_user
from tests.support.llm import assert_totals_match_calls
from tests.support.waits import wait_for
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

CSV = "名称,数量\ntea,2\n".encode()
PRICES = {
    "price_input_per_million": "1.0",
    "price_cached_input_per_million": "0.5",
    "price_output_per_million": "2.0",
    "price_audio_input_per_million": "40.0",
}


def _finish(run: Run) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=["completed", "failed"]).first(),
        timeout=30,
        message=f"run {run.pk} to end",
    )


def _post(fake_llm, provider: str, *, audio: bool, stream: bool) -> tuple[Run, LLMCall]:
    model = ModelConfigFactory(
        base_url=fake_llm.api_base,
        model="echo",
        provider=provider,
        stream=stream,
        input_kinds=["text", "image", "audio", "file"],
        **PRICES,
    )
    owner = make_user()
    conversation = Conversation.objects.create(agent=make_agent(model_config=model), owner=owner)
    workspace = Workspace.objects.get(pk=default_workspace_id())

    def store(data, name):
        return attachment_store(workspace=workspace, uploaded_by=owner, owner=owner, end_user="", data=data, name=name)

    attachments = [store(samples.png(size=(1024, 1024), color=(200, 30, 30)), "photo.png"), store(CSV, "order.csv")]
    if audio:
        attachments.append(store(samples.wav(seconds=1.5), "note.wav"))
    run = _finish(message_submit(conversation=conversation, content="look", user=owner, attachments=attachments).run)
    assert run.status == "completed", run.error
    assert_totals_match_calls(run)
    return run, LLMCall.objects.get(run=run)


def _answer(run: Run) -> str:
    return Message.objects.get(run=run, role=Message.Role.ASSISTANT).content


def _cost(call: LLMCall) -> Decimal:
    # Cached at their price: Anthropic's breakpoints close the message, and the same image sent
    # again (the other parametrisation) is read back from the fake server's prompt cache.
    text = call.prompt_tokens - call.audio_tokens - call.cached_tokens
    cached = Decimal(call.cached_tokens) * Decimal("0.5")
    return (
        Decimal(text) * 1 + cached + Decimal(call.audio_tokens) * 40 + Decimal(call.completion_tokens) * 2
    ) / 1_000_000


def _references_only(call: LLMCall) -> None:
    request = str(call.request)
    assert "attachment" in request and "base64," not in request and "tea,2" not in request


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


@STREAM
@pytest.mark.e2e
def test_openai_takes_an_image_a_file_and_audio(worker, fake_llm, stream):
    run, call = _post(fake_llm, "openai_compatible", audio=True, stream=stream)
    assert _answer(run) == f"look\n[image 1024x1024 #c81e1e]\n[file order.csv {len(CSV)} bytes]\n[audio 1.5 s]"
    _references_only(call)
    content = call.request["messages"][-1]["content"]
    assert [part["type"] for part in content] == ["text", "image_url", "file", "input_audio"]
    assert content[1]["image_url"]["url"].startswith("attachment-data-url:")
    # 1024x1024: 768x768, four tiles; 1.5 s of audio as the server reports it.
    assert call.image_tokens == 765 == fake_rules.openai_image_tokens(1024, 1024, "auto")
    assert call.audio_tokens == 15 == fake_rules.audio_tokens(1.5)
    assert not call.usage_estimated and call.prompt_tokens > call.image_tokens + call.audio_tokens
    assert call.cost == _cost(call) and run.cost == call.cost


@STREAM
@pytest.mark.e2e
def test_anthropic_takes_an_image_and_a_text_document(worker, fake_llm, stream):
    run, call = _post(fake_llm, "anthropic", audio=False, stream=stream)
    assert _answer(run) == f"look\n[image 1024x1024 #c81e1e]\n[file order.csv {len(CSV)} bytes]"
    _references_only(call)
    blocks = call.request["messages"][-1]["content"]
    assert [block["type"] for block in blocks] == ["text", "image", "document"]
    assert blocks[2]["source"]["type"] == "text" and blocks[2]["source"]["data"].startswith("attachment-text:")
    # 1024x1024 under the 1568 long edge: 1,048,576 / 750, rounded up.
    assert call.image_tokens == 1399 == fake_rules.anthropic_image_tokens(1024, 1024)
    assert call.audio_tokens == 0
    assert call.cost == _cost(call)


@pytest.mark.e2e
def test_anthropic_cannot_take_audio_and_says_so(worker, fake_llm):
    model = ModelConfigFactory(
        base_url=fake_llm.api_base, model="echo", provider="anthropic", input_kinds=["text", "image", "audio", "file"]
    )
    owner = make_user()
    conversation = Conversation.objects.create(agent=make_agent(model_config=model), owner=owner)
    clip = attachment_store(
        workspace=Workspace.objects.get(pk=default_workspace_id()),
        uploaded_by=owner,
        owner=owner,
        end_user="",
        data=samples.wav(),
        name="note.wav",
    )
    run = _finish(message_submit(conversation=conversation, content="hear", user=owner, attachments=[clip]).run)
    assert run.status == "failed" and "note.wav" in run.error
    # Refused before sending: no call was made.
    assert not LLMCall.objects.filter(run=run).exists()


def test_a_step_with_an_image_costs_one_statement_more_than_a_text_step(scripted_agent):
    """The attachment rows a request names are read in one statement before sending; a text
    step's statements are as they were."""
    if connection.vendor != "postgresql":
        pytest.skip("a commit is one statement on PostgreSQL; SQLite takes the same statements one by one")
    agent = scripted_agent(
        {"scenarios": [], "fallback": {"content": "{last_user_message}{last_user_parts}"}},
        model_fields={"input_kinds": ["text", "image"]},
    )
    owner = make_user()
    image = attachment_store(
        workspace=Workspace.objects.get(pk=default_workspace_id()),
        uploaded_by=owner,
        owner=owner,
        end_user="",
        data=samples.png(),
        name="a.png",
    )
    counts = {}
    # The first run also reads the agent's version (then cached in the process): not counted.
    for label, attachments in (("first", []), ("text", []), ("image", [image])):
        conversation = Conversation.objects.create(agent=agent, owner=owner)
        with mock.patch("engine.tasks.run_advance_task.delay"):
            run = message_submit(conversation=conversation, content="look", user=owner, attachments=attachments).run
        with CaptureQueriesContext(connection) as queries:
            run_advance(run_id=run.pk)
        run.refresh_from_db()
        assert run.status == "completed"
        counts[label] = len(queries)
    assert _answer(run) == "look\n[image 40x30 #c81e1e]"
    assert counts["image"] == counts["text"] + 1, counts
