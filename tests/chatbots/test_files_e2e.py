"""Through the real worker: a recorded, signed Slack event and Telegram update carrying an image
start a run whose user message holds the image (the shipped fake LLM's echo model describes it
in its answer), the image fetched as the service documents it (Slack's url_private_download with
the bot token; Telegram's getFile, then the file path; Feishu's message resource, WeCom's
media/get and DingTalk's messageFiles/download with the access token fetched first) from a local
server checking each download. A file the agent's model does not take is told in the thread and the text still goes;
a file alone that cannot be fetched starts nothing."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from attachments.models import Attachment, AttachmentUse
from chatbots.files import chat_files_receive
from chatbots.models import ChatEvent
from conversations.models import Run, RunStatus
from tests.attachments import samples
from tests.chatbots import test_dingtalk, test_feishu, test_wecom
from tests.chatbots.support import (
    ASKERS,
    ChatAPI,
    channel_make,
    recorded,
    slack_post,
    telegram_post,
    token_service_post,
    user_map,
)
from tests.support.factories import ModelConfigFactory, make_agent
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

ASKER = {"slack": "U061F7AUR", "telegram": "1111111"}


@pytest.fixture
def owner(transactional_db):
    return User.objects.create_user("bot-owner", password="owner-pass-1")


@pytest.fixture(params=["slack", "telegram"])
def chat_api(request):
    api = ChatAPI(request.param)
    yield api
    api.stop()


def _agent(fake_llm, kinds):
    model = ModelConfigFactory(base_url=fake_llm.api_base, model="echo", max_retries=0, input_kinds=kinds)
    return make_agent(model_config=model)


def _send_image(api: ChatAPI, channel, data: bytes, *, text: str = "What is in this picture?", held: bool = True):
    """The recorded message with an image attached (held by the local API unless `held` is False)."""
    if api.service == "slack":
        url = f"{api.url}/files-pri/T061EG9R6-F0IMG01/photo.png"
        if held:
            url = api.file_add("/files-pri/T061EG9R6-F0IMG01/photo.png", data)
        event = recorded("slack_app_mention")
        event["event"]["text"] = f"<@U0LAN0Z89> {text}" if text else "<@U0LAN0Z89>"
        event["event"]["files"] = [
            {
                "id": "F0IMG01",
                "name": "photo.png",
                "mimetype": "image/png",
                "url_private": url,
                "url_private_download": url,
            }
        ]
        return slack_post(Client(), channel, event)
    if held:
        api.file_add("/AgACAgIAAxkBAAIBZ", data)
    update = recorded("telegram_message")
    del update["message"]["text"]
    if text:
        update["message"]["caption"] = text
    update["message"]["photo"] = [
        {"file_id": "AgACAgIAAxkBAAIBY", "file_unique_id": "s1", "width": 90, "height": 67, "file_size": 900},
        {"file_id": "AgACAgIAAxkBAAIBZ", "file_unique_id": "s2", "width": 40, "height": 30, "file_size": 1800},
    ]
    return telegram_post(Client(), channel, update)


def _posts(api: ChatAPI, count: int, what: str) -> list[dict]:
    return wait_for(lambda: len(api.posts) >= count and list(api.posts), timeout=60, message=what)


def test_an_image_in_the_chat_reaches_the_model(worker, fake_llm, owner, chat_api):
    service = chat_api.service
    agent = _agent(fake_llm, ["text", "image"])
    channel = channel_make(agent=agent, owner=owner, service=service, api_base=chat_api.url)
    user_map(channel, ASKER[service], "ana")
    image = samples.png(size=(40, 30), color=(200, 30, 30))

    assert _send_image(chat_api, channel, image).status_code == 200

    [post] = _posts(chat_api, 1, "the answer posted to the chat")
    assert post["problems"] == []
    assert post["body"]["text"] == "What is in this picture?\n[image 40x30 #c81e1e]"
    assert chat_api.downloads and all(d["problems"] == [] for d in chat_api.downloads)
    if service == "telegram":
        # getFile asked for the largest size, then the file path it answered.
        assert chat_api.downloads[0]["file_id"] == "AgACAgIAAxkBAAIBZ"
        assert chat_api.downloads[1]["path"].endswith("/photos/AgACAgIAAxkBAAIBZ.jpg")
    run = Run.objects.get()
    assert run.status == RunStatus.COMPLETED
    attachment = Attachment.objects.get()
    assert (attachment.owner_id, attachment.end_user, attachment.kind) == (owner.pk, "ana", "image")
    assert attachment.workspace_id == channel.workspace_id
    assert AttachmentUse.objects.filter(attachment=attachment).exists()
    assert ChatEvent.objects.get().run_id == run.pk


def test_an_image_the_model_does_not_take_is_told_and_the_text_goes(worker, fake_llm, owner, chat_api):
    service = chat_api.service
    agent = _agent(fake_llm, ["text"])
    channel = channel_make(agent=agent, owner=owner, service=service, api_base=chat_api.url)
    user_map(channel, ASKER[service], "ana")

    assert _send_image(chat_api, channel, samples.png()).status_code == 200

    posts = _posts(chat_api, 2, "the notice and the answer")
    assert all(post["problems"] == [] for post in posts)
    texts = [post["body"]["text"] for post in posts]
    assert any("does not take" in text for text in texts), texts
    assert "What is in this picture?" in texts
    run = Run.objects.get()
    assert run.status == RunStatus.COMPLETED
    assert not AttachmentUse.objects.exists()


def test_a_file_alone_that_cannot_be_fetched_starts_nothing(worker, fake_llm, owner, chat_api):
    service = chat_api.service
    channel = channel_make(
        agent=_agent(fake_llm, ["text", "image"]), owner=owner, service=service, api_base=chat_api.url
    )
    user_map(channel, ASKER[service], "ana")

    assert _send_image(chat_api, channel, b"", text="", held=False).status_code == 200

    [post] = _posts(chat_api, 1, "the notice")
    assert post["problems"] == [] and "could not be fetched" in post["body"]["text"]
    assert not Run.objects.exists()
    assert ChatEvent.objects.get().outcome == ChatEvent.Outcome.REFUSED


@pytest.fixture(params=["feishu", "dingtalk", "wecom"])
def token_api(request):
    api = ChatAPI(request.param)
    yield api
    api.stop()


def _token_service_image(service: str, key: str):
    if service == "feishu":
        payload = test_feishu.message_event(message_type="image", content=json.dumps({"image_key": key}), mentions=[])
        return payload
    if service == "dingtalk":
        return test_dingtalk.callback(
            conversation_type="1",
            msgtype="picture",
            content={"downloadCode": key, "pictureDownloadCode": "pdc"},
            sessionWebhookExpiredTime=1000,
        )
    return test_wecom.text_message("x").replace(
        "<MsgType><![CDATA[text]]></MsgType><Content><![CDATA[x]]></Content>",
        f"<MsgType><![CDATA[image]]></MsgType><PicUrl><![CDATA[http://p/1]]></PicUrl><MediaId><![CDATA[{key}]]></MediaId>",
    )


def test_an_image_in_a_token_service_s_chat_reaches_the_model(worker, fake_llm, owner, token_api):
    service = token_api.service
    channel = channel_make(
        agent=_agent(fake_llm, ["text", "image"]), owner=owner, service=service, api_base=token_api.url
    )
    user_map(channel, ASKERS[service], "ana")
    token_api.file_add("/img-key-7", samples.png(size=(40, 30), color=(200, 30, 30)))

    response = token_service_post(service, Client(), channel, _token_service_image(service, "img-key-7"))
    assert response.status_code == 200

    [post] = _posts(token_api, 1, "the answer posted to the chat")
    assert post["problems"] == []
    assert token_api.downloads and all(d["problems"] == [] for d in token_api.downloads), token_api.downloads
    assert len(token_api.tokens) == 1  # the download and the answer share the cached token
    assert Run.objects.get().status == RunStatus.COMPLETED
    assert Attachment.objects.get().end_user == "ana"
    assert AttachmentUse.objects.exists()


def _telegram_document(api: ChatAPI, channel, name: str, data: bytes, caption: str = "read this"):
    api.file_add("/BQACAgIAAxkBAAIBd", data)
    update = recorded("telegram_message")
    del update["message"]["text"]
    update["message"]["caption"] = caption
    update["message"]["document"] = {"file_id": "BQACAgIAAxkBAAIBd", "file_name": name, "mime_type": "text/plain"}
    return telegram_post(Client(), channel, update)


def test_a_file_whose_bytes_are_not_its_name_is_told_and_the_caption_goes(worker, fake_llm, owner):
    api = ChatAPI("telegram")
    try:
        channel = channel_make(
            agent=_agent(fake_llm, ["text", "image", "file"]), owner=owner, service="telegram", api_base=api.url
        )
        user_map(channel, ASKER["telegram"], "ana")

        assert _telegram_document(api, channel, "notes.txt", samples.png()).status_code == 200

        posts = _posts(api, 2, "the notice and the answer")
        texts = [post["body"]["text"] for post in posts]
        assert all(post["problems"] == [] for post in posts)
        assert any(".txt" in text and "image/png" in text for text in texts), texts
        assert "read this" in texts
        assert not Attachment.objects.exists()
    finally:
        api.stop()


def test_more_files_than_a_message_may_carry_are_told_and_the_text_goes(worker, fake_llm, owner):
    api = ChatAPI("slack")
    try:
        channel = channel_make(
            agent=_agent(fake_llm, ["text", "image"]), owner=owner, service="slack", api_base=api.url
        )
        user_map(channel, ASKER["slack"], "ana")
        event = ChatEvent.objects.create(
            channel=channel,
            event_id="Ev-many",
            chat_user_id=ASKER["slack"],
            thread_id="C0LAE2ZGG:1515449522.000016",
            reply_to={"channel": "C0LAE2ZGG", "thread_ts": "1515449522.000016"},
            outcome=ChatEvent.Outcome.STARTED,
        )
        files = [
            {"name": f"p{n}.png", "key": api.file_add(f"/files-pri/T-{n}/p.png", samples.png()), "type": "image"}
            for n in range(2)
        ]
        with override_settings(AGENTRY_ATTACHMENTS_PER_MESSAGE=1):
            chat_files_receive(event_id=event.pk, text="two pictures", files=files)

        posts = _posts(api, 2, "the notice and the answer")
        texts = [post["body"]["text"] for post in posts]
        assert any("at most 1 attachments" in text for text in texts), texts
        assert "two pictures" in texts
        assert api.downloads == [] and not Attachment.objects.exists()
    finally:
        api.stop()
