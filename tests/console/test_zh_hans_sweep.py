"""Every operator page and admin page, rendered in Simplified Chinese over rows of every model,
shows no English an operator would have to read: what is left is an identifier, a unit, a
product name, or data the rows hold. Each offender is printed with its page."""

import json
import re
from html.parser import HTMLParser

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib import admin
from django.urls import reverse

from tests.console.operator_pages import models_without_rows, pages, seed

pytestmark = pytest.mark.django_db

WORD = re.compile(r"[A-Za-z]{3,}")
# Names and notations that read the same in a Chinese page: products and protocols, formats,
# units, and the language switcher's "English" (each language is named in its own language).
ALLOWED = {
    word.lower()
    for word in """
    Agentry Django OpenAI Anthropic Claude DeepSeek Qwen Doubao Moonshot MiniMax Ollama vLLM llama cpp
    Token Tokens API APIs HTTP HTTPS URL URLs JSON JSONL YAML CSV SSE MCP LLM OpenAPI Swagger ReDoc Redoc
    UUID UTC CPU SQL PostgreSQL Redis Celery Python stdio GET POST PUT PATCH DELETE HEAD Bearer
    Authorization Content Type Webhook Webhooks SMTP CSRF ASCII UTF PDF HTML Markdown regex
    English Streamable Cookie Cookies TLS Retry After Cron curl IANA Lark Slack DingTalk WeCom Feishu Telegram
    Word Excel PowerPoint JPEG PNG OCR WebP GIF
    """.split()
} | {
    # Identifiers inside the examples of help texts, which stay as typed: keyboard keys, template
    # variables, JSON keys and values, rule expressions, sample names, tokenizer and command names.
    word.lower()
    for word in """
    Command Control Mac LDAP REST PII now weekday disabled nUser ask researcher amount currency CNY args
    Pointer data petId pets readOnlyHint destructiveHint uvx jieba embeddings arguments subset assistant
    draft published expired operationId petstore findPets prefix transcriptions docs bots well known quality tier
    """.split()
}
# What a text box holds is data; what code and kbd show is typed as it is (a command, a setting).
SKIPPED_TAGS = {"script", "style", "textarea", "noscript", "template", "code", "kbd"}
# An identifier with an underscore (a setting such as CSRF_COOKIE_SECURE=0) is typed as it is too.
IDENTIFIER = re.compile(r"\b\w*_\w*\b")
SHOWN_ATTRIBUTES = {"title", "placeholder", "aria-label", "alt"}


class VisibleText(HTMLParser):
    """The text a reader sees or hears: element text outside scripts, styles and text boxes (what
    a box holds is data), plus titles, placeholders, labels for screen readers and the words on
    buttons."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in SKIPPED_TAGS:
            self.skipping += 1
        attributes = dict(attrs)
        for name in SHOWN_ATTRIBUTES:
            if attributes.get(name):
                self.parts.append(attributes[name])
        if tag == "input" and attributes.get("type") in ("submit", "button", "reset") and attributes.get("value"):
            self.parts.append(attributes["value"])

    def handle_endtag(self, tag):
        if tag in SKIPPED_TAGS and self.skipping:
            self.skipping -= 1

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = VisibleText()
    parser.feed(html)
    return "\n".join(parser.parts)


def _data_words() -> set[str]:
    """Every word the database holds (names, URLs, JSON, event types): a page showing them shows
    the operator's data, not untranslated code."""
    words = set()
    for model in apps.get_models():
        # A stored choice (a status, a stop reason) is shown by its translated label, not as data.
        fields = [f.attname for f in model._meta.concrete_fields if not f.choices]
        for row in model._default_manager.all().values(*fields):
            for value in row.values():
                if value is None or isinstance(value, bool | int | float):
                    continue
                text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
                words.update(word.lower() for word in WORD.findall(text))
                if not isinstance(value, str):
                    # A read-only JSON field in the admin shows the value as Python writes it
                    # (None, True): still the row's data.
                    words.update(word.lower() for word in WORD.findall(str(value)))
    return words


def english_words(text: str, allowed: set[str]) -> list[str]:
    text = IDENTIFIER.sub(" ", text)
    return sorted({word for word in WORD.findall(text) if word.lower() not in allowed})


def test_english_words_are_found_in_text_and_titles_but_not_in_scripts_or_data():
    html = (
        '<p title="Open the run">运行</p><script>var hidden = 1;</script><textarea>{"city": "x"}</textarea>'
        '<input type="submit" value="Save"><input type="hidden" value="secret"><p>Agentry 的 Token</p>'
    )
    assert english_words(visible_text(html), ALLOWED) == ["Open", "Save", "run", "the"]


def test_every_page_reads_in_chinese(client):
    seeded = seed()
    assert not models_without_rows(), "give these a row in tests/console/operator_pages.seed()"
    client.force_login(seeded.operator)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    allowed = ALLOWED | _data_words()
    offenders = {}
    for url in pages(seeded):
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        assert response.headers["Content-Language"] == "zh-hans", url
        words = english_words(visible_text(response.content.decode()), allowed)
        if words:
            offenders[url] = words
    # The sign-in pages, to someone not signed in yet (logging out forgets the cookies).
    client.logout()
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    for url in (reverse("admin:login"), reverse("approvals:login")):
        words = english_words(visible_text(client.get(url).content.decode()), allowed)
        if words:
            offenders[url] = words
    for url, words in offenders.items():
        print(f"{url}: {' '.join(words)}")
    assert not offenders, f"English on {len(offenders)} page(s) (listed above): {offenders}"
    assert len(admin.site._registry) > 20


def test_terms_read_as_the_glossary_says(client):
    """docs/glossary.md: an LLM token is "Token", an API token "令牌", and the runs list is 运行
    (运行数 read as "number of runs")."""
    seeded = seed()
    client.force_login(seeded.operator)
    client.cookies[settings.LANGUAGE_COOKIE_NAME] = "zh-hans"

    index = visible_text(client.get(reverse("admin:index")).content.decode())
    assert "运行数" not in index and "\n运行\n" in index
    assert "API 令牌" in index

    runs = visible_text(client.get(reverse("admin:conversations_run_changelist")).content.decode())
    assert "令牌" not in runs and "\nToken\n" in runs
    config = client.get(reverse("admin:agents_modelconfig_change", args=[seeded.agent.model_config_id]))
    assert "每百万 Token 价格" in config.content.decode() and "令牌" not in visible_text(config.content.decode())
