"""The widget's and the hook's admin pages hand other systems absolute addresses: on
AGENTRY_PUBLIC_URL when set, else on the request's origin with a warning when that is only a
guess (a local host, or ALLOWED_HOSTS taking any host). The widget's page previews the hosted
page in a frame, for those who may change the widget, without widening its allowed origins."""

import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings

from tests.support.factories import make_agent
from tests.widgets.test_widget_api import SITE, owner, widget  # noqa: F401 - fixtures
from triggers.models import Hook
from widgets.tokens import end_user_token_verify

pytestmark = pytest.mark.django_db

PUBLIC = "https://agentry.example.com"
WARNING = "AGENTRY_PUBLIC_URL is not set"


def _page(client: Client, widget, **extra) -> str:
    response = client.get(f"/admin/widgets/widget/{widget.pk}/change/", **extra)
    assert response.status_code == 200
    return unescape(response.content.decode())


def test_with_a_public_url_every_address_on_the_widgets_page_is_on_it(admin_client, widget):  # noqa: F811
    with override_settings(AGENTRY_PUBLIC_URL=PUBLIC):
        page = _page(admin_client, widget, HTTP_HOST="localhost")
    assert f'<script src="{PUBLIC}/widget.js" data-widget="{widget.pk}"' in page
    assert f"{PUBLIC}/chat/{widget.pk}/?token=" in page
    assert WARNING not in page


def test_without_one_the_addresses_use_the_requests_origin(admin_client, widget):  # noqa: F811
    with override_settings(AGENTRY_PUBLIC_URL="", ALLOWED_HOSTS=["agentry.corp.example"]):
        page = _page(admin_client, widget, HTTP_HOST="agentry.corp.example")
    assert '<script src="http://agentry.corp.example/widget.js"' in page
    assert WARNING not in page and 'src="/widget.js"' not in page


@pytest.mark.parametrize(("host", "allowed"), [("localhost:8000", ["localhost"]), ("any.example", ["*"])])
def test_a_guessed_origin_is_warned_about(admin_client, widget, host, allowed):  # noqa: F811
    with override_settings(AGENTRY_PUBLIC_URL="", ALLOWED_HOSTS=allowed):
        page = _page(admin_client, widget, HTTP_HOST=host)
    assert f'<script src="http://{host}/widget.js"' in page and WARNING in page


def _preview_url(page: str) -> str | None:
    found = re.search(r'<iframe class="widget-preview" src="([^"]+)"', page)
    return found and found.group(1)


def test_the_preview_frames_the_hosted_page_for_the_operator_alone(admin_client, admin_user, widget):  # noqa: F811
    url = _preview_url(_page(admin_client, widget))
    assert url and url.startswith(f"/chat/{widget.pk}/?token=")
    token = parse_qs(urlsplit(url).query)["token"][0]
    assert end_user_token_verify(widget=widget, token=token) == f"admin-preview-{admin_user.pk}"
    hosted = Client().get(url)
    assert hosted.status_code == 200 and hosted["X-Frame-Options"] == "SAMEORIGIN"
    # The widget's API still refuses any origin it does not allow.
    messages = f"/api/v1/widget/{widget.pk}/conversations/"
    refused = Client(HTTP_ORIGIN="https://elsewhere.example").post(
        messages, {}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert refused.status_code == 403


def test_who_may_only_view_the_widget_gets_no_preview(widget):  # noqa: F811
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_widget"))
    client = Client()
    client.force_login(viewer)
    page = _page(client, widget)
    assert _preview_url(page) is None and f"/chat/{widget.pk}/?token=…" in page


def test_the_hooks_page_shows_its_absolute_url(admin_client):
    hook = Hook.objects.create(agent=make_agent(), name="orders", secret="whsec_x", message="hi")
    with override_settings(AGENTRY_PUBLIC_URL=PUBLIC):
        page = admin_client.get(f"/admin/triggers/hook/{hook.pk}/change/").content.decode()
        listing = admin_client.get("/admin/triggers/hook/").content.decode()
    assert f"{PUBLIC}/api/v1/hooks/{hook.pk}/" in page and f"{PUBLIC}/api/v1/hooks/{hook.pk}/" in listing
    with override_settings(AGENTRY_PUBLIC_URL="", ALLOWED_HOSTS=["localhost"]):
        local = admin_client.get(f"/admin/triggers/hook/{hook.pk}/change/", HTTP_HOST="localhost").content.decode()
    assert f"http://localhost/api/v1/hooks/{hook.pk}/" in local and WARNING in local
