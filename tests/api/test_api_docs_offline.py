"""The API docs work offline: Swagger UI comes from the app's own static files, and the
pages reference nothing on another origin (no CDN, no web fonts, no online validator)."""

import json
import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import pytest
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db

DOCS_PAGES = ["/api/docs/"]
# Anything that names another origin: a scheme with a host, or a protocol-relative URL.
FOREIGN = re.compile(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}", re.IGNORECASE)
SCRIPT_URL = re.compile(r'\burl: ("(?:[^"\\]|\\.)*")')
CSS_URL = re.compile(r"""(?:url\(\s*|@import\s+)(?:"([^"]*)"|'([^']*)'|([^)'"\s;]+))""")


class _References(HTMLParser):
    """Every URL the page loads by itself: scripts, stylesheets, icons, images, frames."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.schema_urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag in ("script", "img", "iframe") and attributes.get("src"):
            self.urls.append(attributes["src"])
        if tag == "link" and attributes.get("href"):
            self.urls.append(attributes["href"])
        if tag == "redoc" and attributes.get("spec-url"):
            self.schema_urls.append(attributes["spec-url"])
        self._in_script = tag == "script" and not attributes.get("src")

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            # Swagger UI is started by an inline script: `SwaggerUIBundle({url: "<schema>", …})`.
            self.schema_urls += [json.loads(u) for u in SCRIPT_URL.findall(data)]


@pytest.fixture
def served(settings, tmp_path):
    """A client of the app with its static files collected, as the image and dev.sh do."""
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", "--noinput", verbosity=0)
    # A new client loads the middleware anew, so WhiteNoise indexes this STATIC_ROOT.
    return Client()


def _same_origin(url: str) -> bool:
    parts = urlsplit(url)
    return not parts.scheme and not parts.netloc


@pytest.mark.parametrize("page", DOCS_PAGES)
def test_docs_pages_load_only_same_origin_assets_and_every_one_is_served(served, page):
    response = served.get(page)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    # The browser itself is told to load nothing from elsewhere.
    policy = [rule.strip() for rule in response["Content-Security-Policy"].split(";")]
    assert "default-src 'self'" in policy and "img-src 'self' data:" in policy
    html = response.content.decode()
    assert FOREIGN.findall(html) == []
    references = _References()
    references.feed(html)
    assert references.urls, "the page loads no assets at all"
    assert [u for u in references.urls if not _same_origin(u)] == []
    assert any("drf_spectacular_sidecar" in u for u in references.urls)

    for url in references.urls:
        asset = served.get(urljoin(page, url))
        assert asset.status_code == 200, url
        body = b"".join(asset.streaming_content) if asset.streaming else asset.content
        assert body, url
        if url.endswith(".css"):
            # A stylesheet can reach out too: what its url()s and imports load must be inline
            # (data:) or on this origin. (SVG namespaces inside data: URLs load nothing.)
            loaded = [next(filter(None, found)) for found in CSS_URL.findall(body.decode())]
            assert loaded and [u for u in loaded if not u.startswith("data:") and not _same_origin(u)] == [], url

    # The schema the page renders comes from here as well.
    assert references.schema_urls and all(_same_origin(u) for u in references.schema_urls)
    for url in references.schema_urls:
        assert served.get(urljoin(page, url)).status_code == 200, url


def test_swagger_ui_is_told_not_to_call_the_online_validator(served):
    html = served.get("/api/docs/").content.decode()
    assert '"validatorUrl": null' in html
