"""Which requests may carry an attachment's body (platform_site.body_limit.body_limit): the API's,
the widget's and (signed in) the try page's uploads; every other path keeps the general limit."""

from django.conf import settings

from platform_site.body_limit import body_limit

WIDGET = "/api/v1/widget/0d7c2a6e-7a07-4b3c-9d7e-3f1b5a2c9e10/attachments/"


def _scope(path: str, cookie: str = "") -> dict:
    return {"path": path, "headers": [(b"cookie", cookie.encode())] if cookie else []}


def test_the_attachment_uploads_take_an_attachment_body():
    upload = max(settings.AGENTRY_MAX_ATTACHMENT_BODY_BYTES, settings.AGENTRY_MAX_BODY_BYTES)
    assert body_limit(_scope("/api/v1/attachments/")) == upload
    assert body_limit(_scope(WIDGET)) == upload
    session = f"{settings.SESSION_COOKIE_NAME}=x"
    assert body_limit(_scope("/monitor/try/attachments/", session)) == upload


def test_other_paths_and_an_anonymous_try_upload_keep_the_general_limit():
    for scope in (
        _scope("/monitor/try/attachments/"),
        _scope("/monitor/try/send/", f"{settings.SESSION_COOKIE_NAME}=x"),
        _scope(WIDGET.replace("attachments/", "conversations/")),
        _scope("/api/v1/widget/not-a-widget/attachments/"),
    ):
        assert body_limit(scope) == settings.AGENTRY_MAX_BODY_BYTES
