"""POST /api/v1/attachments/ and the downloads (the API's and the console's): the bad-input sweep
through HTTP (each a clear 4xx, never a 500), the download's headers, and another workspace's,
owner's or end user's attachment answering as a missing one (404)."""

import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from PIL import Image
from rest_framework.test import APIClient

from attachments.models import Attachment
from conversations.tokens import api_token_create
from tests.attachments import samples
from tests.support.api import client_for
from tests.support.factories import make_user
from workspaces.access import SESSION_KEY
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Workspace
from workspaces.roles import Role

pytestmark = pytest.mark.django_db
URL = "/api/v1/attachments/"


@pytest.fixture
def owner():
    user = make_user()
    membership_set(user=user, workspace=Workspace.objects.get(pk=default_workspace_id()), role=Role.OWNER)
    return user


def _upload(client, data: bytes, name: str = "a.png", **fields):
    return client.post(URL, {"file": SimpleUploadedFile(name, data, content_type="image/png"), **fields})


def test_upload_answers_the_reference_and_the_download_is_safe(stored, owner):
    api = client_for(owner)
    response = _upload(api, samples.jpeg(exif=samples.gps_exif()), name="photo.jpg", end_user="eu-1")
    assert response.status_code == 201, response.content
    body = response.json()
    assert {key: body[key] for key in ("kind", "media_type", "width", "height", "end_user", "name")} == {
        "kind": "image",
        "media_type": "image/jpeg",
        "width": 40,
        "height": 30,
        "end_user": "eu-1",
        "name": "photo.jpg",
    }
    assert len(body["sha256"]) == 64 and body["size"] > 0
    assert api.get(f"{URL}{body['id']}/").json()["id"] == body["id"]
    download = api.get(f"{URL}{body['id']}/content/")
    assert download.status_code == 200
    assert download["Content-Disposition"].startswith("attachment;") and "photo.jpg" in download["Content-Disposition"]
    assert download["X-Content-Type-Options"] == "nosniff"
    assert download["Content-Type"] == "image/jpeg"
    assert "sandbox" in download["Content-Security-Policy"]
    content = b"".join(download.streaming_content)
    assert len(content) == body["size"] and not Image.open(io.BytesIO(content)).getexif()
    # The same bytes again: the same attachment.
    assert _upload(api, samples.jpeg(exif=samples.gps_exif()), name="p.jpg", end_user="eu-1").json()["id"] == body["id"]


BAD = {
    "empty": (b"", "a.png"),
    "truncated-png": (samples.png()[:60], "a.png"),
    "truncated-jpeg": (samples.jpeg()[:200], "a.jpg"),
    "50-megapixels": (samples.bomb_png(), "big.png"),
    "gif-and-html": (samples.gif() + b"<html><script>alert(1)</script></html>", "a.gif"),
    "gif-and-zip": (samples.gif() + samples.zip_bytes(), "a.gif"),
    "wrong-extension": (samples.png(), "invoice.pdf"),
    "svg-with-script": (samples.SVG_WITH_SCRIPT, "logo.svg"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_uploads_are_a_clear_400(stored, owner, case):
    data, name = BAD[case]
    response = _upload(client_for(owner), data, name=name)
    assert response.status_code == 400, (case, response.status_code, response.content[:300])
    body = response.json()
    assert body["message"] and "file" in body["extra"]["fields"]
    assert not Attachment.objects.exists()


def test_too_large_too_many_and_not_multipart_are_4xx(stored, owner, settings):
    api = client_for(owner)
    settings.AGENTRY_ATTACHMENT_MAX_BYTES = 1000
    assert _upload(api, b"x" * 1001, name="a.txt").status_code == 413
    files = [SimpleUploadedFile(f"{n}.txt", b"hi %d" % n) for n in range(100)]
    response = api.post(URL, {"file": files})
    assert response.status_code == 400 and "exactly one" in response.json()["message"]
    response = api.post(URL, {"file": [SimpleUploadedFile(f"{n}.txt", b"x") for n in range(101)]})
    assert response.status_code == 400
    assert api.post(URL, json.dumps({"file": "x"}), content_type="application/json").status_code == 415
    assert api.post(URL, {"end_user": "eu"}).status_code == 400
    assert _upload(api, b"hi", name="a.txt", end_user="bad\nid").status_code == 400
    assert not Attachment.objects.exists()


def test_a_token_that_may_not_start_runs_may_not_upload(stored):
    viewer = make_user()
    membership_set(user=viewer, workspace=Workspace.objects.get(pk=default_workspace_id()), role=Role.VIEWER)
    assert _upload(client_for(viewer), samples.png()).status_code == 403


def test_another_owners_or_workspaces_attachment_is_a_404(stored, owner):
    attachment_id = _upload(client_for(owner), samples.png()).json()["id"]
    stranger = make_user()
    membership_set(user=stranger, workspace=Workspace.objects.get(pk=default_workspace_id()), role=Role.OWNER)
    # The owner themselves, with a token of another workspace they belong to.
    other = Workspace.objects.create(name="Other", slug="other")
    membership_set(user=owner, workspace=other, role=Role.OWNER)
    elsewhere = APIClient()
    elsewhere.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=owner, name='b', workspace=other)[1]}")
    for api in (client_for(stranger), elsewhere):
        assert api.get(f"{URL}{attachment_id}/").status_code == 404
        assert api.get(f"{URL}{attachment_id}/content/").status_code == 404
    assert client_for(owner).get(f"{URL}00000000-0000-0000-0000-000000000000/content/").status_code == 404


def test_the_console_download_is_for_operators_of_the_workspace(stored, owner):
    attachment_id = _upload(client_for(owner), samples.png()).json()["id"]
    url = f"/monitor/attachments/{attachment_id}/"
    operator = make_user(staff=True)
    membership_set(user=operator, workspace=Workspace.objects.get(pk=default_workspace_id()), role=Role.OPERATOR)
    pages = Client()
    pages.force_login(operator)
    response = pages.get(url)
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff" and response["Content-Type"] == "image/png"
    # An operator of another workspace: not found; someone without the permission: refused.
    outsider = make_user(staff=True)
    other = Workspace.objects.create(name="O", slug="o")
    membership_set(user=outsider, workspace=other, role=Role.OPERATOR)
    pages.force_login(outsider)
    session = pages.session
    session[SESSION_KEY] = other.pk  # the header switcher's choice
    session.save()
    assert pages.get(url).status_code == 404
    approver = make_user(staff=True)
    membership_set(user=approver, workspace=Workspace.objects.get(pk=default_workspace_id()), role=Role.APPROVER)
    pages.force_login(approver)
    assert pages.get(url).status_code == 403


def test_the_upload_route_may_carry_an_attachments_body_and_others_may_not(settings):
    from platform_site.body_limit import body_limit

    settings.AGENTRY_MAX_BODY_BYTES = 4_000_000
    settings.AGENTRY_MAX_ATTACHMENT_BODY_BYTES = 21_000_000
    assert body_limit({"path": URL, "headers": []}) == 21_000_000
    assert body_limit({"path": f"{URL}00000000-0000-0000-0000-000000000000/", "headers": []}) == 4_000_000
    assert body_limit({"path": "/api/v1/conversations/", "headers": []}) == 4_000_000


def test_a_download_reads_a_pinned_number_of_statements(stored, owner, django_assert_max_num_queries):
    api = client_for(owner)
    attachment_id = _upload(api, samples.png()).json()["id"]
    # The token with its user and binding (one statement), then the attachment: whatever their number.
    for n in range(3):
        _upload(api, samples.png(color=(n, n, n)))
    with django_assert_max_num_queries(2):
        response = api.get(f"{URL}{attachment_id}/content/")
    assert response.status_code == 200


def test_the_operators_group_holds_the_download_permission_and_the_conversation_rule_still_applies(stored, owner):
    from django.contrib.auth.models import Group, Permission

    attachment_id = _upload(client_for(owner), samples.png()).json()["id"]
    operator = make_user(staff=True, groups=[Group.objects.get(name="Operators")])
    assert operator.has_perm("attachments.view_attachment")
    pages = Client()
    pages.force_login(operator)
    url = f"/monitor/attachments/{attachment_id}/"
    # Another owner's attachment, as another owner's conversation: only with the permission to
    # read everyone's conversations.
    assert pages.get(url).status_code == 404
    operator.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    pages.force_login(type(operator).objects.get(pk=operator.pk))
    assert pages.get(url).status_code == 200


def test_a_token_scoped_to_approvals_reads_no_attachment(stored, owner):
    attachment_id = _upload(client_for(owner), samples.png()).json()["id"]
    _, plaintext = api_token_create(user=owner, name="approvals only", scopes=["approvals"])
    narrow = APIClient()
    narrow.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert narrow.get(f"{URL}{attachment_id}/content/").status_code == 403
    assert _upload(narrow, samples.gif(), name="a.gif").status_code == 403
