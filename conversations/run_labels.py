"""A run's tags and metadata, as an API client attaches them: checked here for every way in
(REST messages, /v1 chat completions), bounded as OpenAI bounds its `metadata`.

Tags are short words from a safe set (letters, digits and `_ - . /`): they go in URLs
(?tag=) and the admin's filter unquoted. Metadata keys may not hold ":", which separates a key
from its value in ?meta=key:value."""

import re

from django.utils.translation import gettext as _

from conversations.models import Run, RunLabel

MAX_TAGS = 20
TAG_MAX_CHARS = 64
MAX_METADATA_KEYS = 16
METADATA_KEY_MAX_CHARS = 64
METADATA_VALUE_MAX_CHARS = 512
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]*")


class LabelsInvalid(ValueError):
    """`field` ("tags" or "metadata") is not acceptable; the message says why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def tag_check(tag) -> str:
    if not isinstance(tag, str) or not tag:
        raise LabelsInvalid("tags", _("Each tag must be a non-empty string."))
    if len(tag) > TAG_MAX_CHARS or not TAG_PATTERN.fullmatch(tag):
        raise LabelsInvalid(
            "tags",
            _("Tag %(tag)r: at most %(count)s characters, letters, digits and _ - . / only, not starting with a sign.")
            % {"tag": tag[:TAG_MAX_CHARS], "count": TAG_MAX_CHARS},
        )
    return tag


def tags_clean(tags) -> list[str]:
    """The tags, each once, in the order given."""
    if tags is None:
        return []
    if not isinstance(tags, list):
        raise LabelsInvalid("tags", _("Must be a list of strings."))
    if len(tags) > MAX_TAGS:
        raise LabelsInvalid("tags", _("At most %(count)s tags.") % {"count": MAX_TAGS})
    return list(dict.fromkeys(tag_check(tag) for tag in tags))


def metadata_key_check(key) -> str:
    if not isinstance(key, str) or not key or len(key) > METADATA_KEY_MAX_CHARS or ":" in key or not key.isprintable():
        raise LabelsInvalid(
            "metadata",
            _("Each key must be 1 to %(count)s printable characters without a colon.")
            % {"count": METADATA_KEY_MAX_CHARS},
        )
    return key


def metadata_value_check(value) -> str:
    if not isinstance(value, str) or len(value) > METADATA_VALUE_MAX_CHARS or "\x00" in value:
        raise LabelsInvalid(
            "metadata",
            _("Each value must be a string of at most %(count)s characters, without NUL.")
            % {"count": METADATA_VALUE_MAX_CHARS},
        )
    return value


def metadata_clean(metadata) -> dict[str, str]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise LabelsInvalid("metadata", _("Must be an object of strings."))
    if len(metadata) > MAX_METADATA_KEYS:
        raise LabelsInvalid("metadata", _("At most %(count)s keys.") % {"count": MAX_METADATA_KEYS})
    return {metadata_key_check(key): metadata_value_check(value) for key, value in metadata.items()}


def run_labels(run: Run) -> list[RunLabel]:
    """The lookup rows of the run's tags and metadata (unsaved), none for a run without them."""
    return [RunLabel(run=run, key="", value=tag) for tag in run.tags] + [
        RunLabel(run=run, key=key, value=value) for key, value in run.metadata.items()
    ]
