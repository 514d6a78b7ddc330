"""The admin of chat channels: credentials are written as a JSON object of the service's names
and never shown again, the callback URL is on the page, events are read-only, and the pages need
the model permissions."""

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from chatbots.inbound import channel_secrets
from chatbots.models import ChatChannel, ChatEvent
from tests.chatbots.support import SECRETS, TELEGRAM_SECRETS, channel_make
from tests.support.factories import make_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def root():
    return User.objects.create_superuser("root", password="root-pass-1")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form(agent, secrets: str, service: str = "telegram") -> dict:
    return {
        "agent": agent.pk,
        "name": "电报机器人",
        "service": service,
        "enabled": "on",
        "new_secrets": secrets,
        "api_base": "",
        "users-TOTAL_FORMS": "0",
        "users-INITIAL_FORMS": "0",
    }


def test_a_channel_is_created_with_its_secrets_which_are_never_shown(root):
    agent = make_agent()
    client = _client(root)
    wrong = client.post("/admin/chatbots/chatchannel/add/", _form(agent, '{"bot_token": "x"}'))
    assert wrong.status_code == 200 and "bot_token, secret_token" in wrong.content.decode()
    assert client.post("/admin/chatbots/chatchannel/add/", _form(agent, "")).status_code == 200
    assert not ChatChannel.objects.exists()

    response = client.post("/admin/chatbots/chatchannel/add/", _form(agent, json.dumps(TELEGRAM_SECRETS)))
    assert response.status_code == 302, response.content[:2000]
    channel = ChatChannel.objects.get()
    assert channel_secrets(channel) == TELEGRAM_SECRETS and channel.owner == root
    page = client.get(f"/admin/chatbots/chatchannel/{channel.pk}/change/").content.decode()
    assert f"/chatbots/{channel.pk}/" in page
    assert TELEGRAM_SECRETS["secret_token"] not in page and TELEGRAM_SECRETS["bot_token"] not in page

    # Saved again with the field left empty, the stored secrets stay.
    form = {**_form(agent, ""), "name": "renamed"}
    assert client.post(f"/admin/chatbots/chatchannel/{channel.pk}/change/", form).status_code == 302
    channel.refresh_from_db()
    assert channel.name == "renamed" and channel_secrets(channel) == TELEGRAM_SECRETS


@pytest.mark.parametrize("service", ["feishu", "dingtalk", "wecom"])
def test_every_service_is_offered_with_its_secrets_names(root, service):
    agent = make_agent()
    client = _client(root)
    page = client.get("/admin/chatbots/chatchannel/add/").content.decode()
    assert f'value="{service}"' in page
    for names in ("app_id, app_secret, verification_token, encrypt_key", "corp_id, corp_secret, agent_id"):
        assert names in page
    wrong = client.post("/admin/chatbots/chatchannel/add/", _form(agent, '{"token": "x"}', service))
    assert wrong.status_code == 200 and not ChatChannel.objects.exists()
    response = client.post("/admin/chatbots/chatchannel/add/", _form(agent, json.dumps(SECRETS[service]), service))
    assert response.status_code == 302, response.content[:2000]
    assert channel_secrets(ChatChannel.objects.get()) == SECRETS[service]


def test_pages_need_the_model_permissions_and_events_are_read_only(root):
    channel = channel_make(agent=make_agent(), owner=root, service="telegram")
    event = ChatEvent.objects.create(channel=channel, event_id="1", outcome="unknown_user")
    staff = User.objects.create_user("staff", password="staff-pass-1", is_staff=True)
    client = _client(staff)
    assert client.get("/admin/chatbots/chatchannel/").status_code == 403
    staff.user_permissions.add(
        Permission.objects.get(codename="view_chatchannel"), Permission.objects.get(codename="view_chatevent")
    )
    staff = User.objects.get(pk=staff.pk)
    client = _client(staff)
    assert client.get("/admin/chatbots/chatchannel/").status_code == 200
    assert client.get(f"/admin/chatbots/chatchannel/{channel.pk}/change/").status_code == 200
    assert client.post("/admin/chatbots/chatchannel/add/", {}).status_code == 403
    assert _client(root).get("/admin/chatbots/chatevent/add/").status_code == 403
    assert _client(root).post(f"/admin/chatbots/chatevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403


def test_only_a_superuser_links_a_chat_user_to_a_platform_account(root):
    from chatbots.models import ChatUser
    from workspaces.membership import membership_set
    from workspaces.models import Workspace
    from workspaces.roles import Role

    channel = channel_make(agent=make_agent(), owner=root, service="telegram")
    builder = User.objects.create_user("builder", password="builder-pass-1", is_staff=True)
    membership_set(user=builder, workspace=Workspace.objects.get(pk=channel.workspace_id), role=Role.OWNER)
    form = {
        **_form(channel.agent, ""),
        "users-TOTAL_FORMS": "1",
        "users-0-chat_user_id": "1111111",
        "users-0-end_user": "tg-user",
        "users-0-account": str(root.pk),
    }
    response = _client(builder).post(f"/admin/chatbots/chatchannel/{channel.pk}/change/", form)
    assert response.status_code == 302, response.content[:3000]
    assert ChatUser.objects.get().account is None
    mapped = ChatUser.objects.get()
    by_root = {**form, "users-INITIAL_FORMS": "1", "users-0-id": str(mapped.pk), "users-0-channel": str(channel.pk)}
    assert _client(root).post(f"/admin/chatbots/chatchannel/{channel.pk}/change/", by_root).status_code == 302
    assert ChatUser.objects.get().account == root
    # The same chat user twice is a form error, not a database one.
    twice = {
        **by_root,
        "users-TOTAL_FORMS": "2",
        "users-1-chat_user_id": "1111111",
        "users-1-end_user": "again",
        "users-1-account": "",
    }
    assert _client(root).post(f"/admin/chatbots/chatchannel/{channel.pk}/change/", twice).status_code == 200
    assert ChatUser.objects.count() == 1
