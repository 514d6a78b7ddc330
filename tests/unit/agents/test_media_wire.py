"""Attachments on the wire (agents.providers.media and the two adapters): each descriptor mapped to
its provider's format with a reference in place of the bytes, images and audio counted by each
provider's published rule, and estimates that never read a reference as text."""

import pytest

from agents.providers import ProviderError
from agents.providers.anthropic import AnthropicProvider
from agents.providers.base import MESSAGE_OVERHEAD, estimate_message_tokens, estimate_tokens
from agents.providers.media import (
    FILE_TOKENS_FLAT,
    IMAGE_TOKENS_FLAT,
    MediaTokens,
    anthropic_image_tokens,
    audio_tokens,
    media_tokens,
    openai_image_tokens,
)
from agents.providers.openai_compatible import OpenAICompatibleProvider

ID = "0b7e4c1e-4a55-4f6e-9a39-3c1a1b2c3d4e"
IMAGE = {
    "type": "image",
    "attachment": ID,
    "media_type": "image/png",
    "name": "a.png",
    "size": 9,
    "width": 1024,
    "height": 1024,
}
PDF = {"type": "file", "attachment": ID, "media_type": "application/pdf", "name": "invoice.pdf", "size": 4000}
TEXT = {"type": "file", "attachment": ID, "media_type": "text/csv", "name": "rows.csv", "size": 402}
WAV = {"type": "audio", "attachment": ID, "media_type": "audio/wav", "name": "note.wav", "size": 9, "duration_ms": 1510}
MP3 = {**WAV, "media_type": "audio/mpeg", "name": "note.mp3"}
OGG = {**WAV, "media_type": "audio/ogg", "name": "note.ogg"}
# Without the prompt cache's breakpoints (tests/unit/agents/test_prompt_caching.py), which
# turn the last message into blocks.
MODEL = {"model": "m", "max_tokens": 100, "prompt_caching": "off"}


def _user(*parts, text="What is this?"):
    return [{"role": "user", "content": [{"type": "text", "text": text}, *parts]}]


def _openai(messages):
    return OpenAICompatibleProvider().build_request(
        model=MODEL, messages=messages, tools=[], tool_choice="auto", parallel_tool_calls=True
    )


def _anthropic(messages):
    return AnthropicProvider().build_request(
        model=MODEL, messages=messages, tools=[], tool_choice="auto", parallel_tool_calls=True
    )


def test_openai_sends_each_part_in_its_own_content_part_with_a_reference():
    body = _openai(_user(IMAGE, WAV, MP3, PDF))
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": f"attachment-data-url:{ID}"}},
        {"type": "input_audio", "input_audio": {"data": f"attachment:{ID}", "format": "wav"}},
        {"type": "input_audio", "input_audio": {"data": f"attachment:{ID}", "format": "mp3"}},
        {"type": "file", "file": {"filename": "invoice.pdf", "file_data": f"attachment-data-url:{ID}"}},
    ]


def test_openai_refuses_audio_it_has_no_format_for():
    with pytest.raises(ProviderError) as refused:
        _openai(_user(OGG))
    assert not refused.value.retryable and "note.ogg" in str(refused.value)


def test_anthropic_sends_images_pdfs_and_text_files_as_blocks_with_references():
    body = _anthropic(_user(IMAGE, PDF, TEXT))
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": f"attachment:{ID}"}},
                {
                    "type": "document",
                    "source": {"type": "base64", "media_type": "application/pdf", "data": f"attachment:{ID}"},
                    "title": "invoice.pdf",
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": f"attachment-text:{ID}"},
                    "title": "rows.csv",
                },
            ],
        }
    ]


def test_anthropic_text_only_messages_stay_plain_strings():
    body = _anthropic([{"role": "user", "content": "hello"}])
    assert body["messages"] == [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(
    "part", [WAV, {**PDF, "media_type": "application/vnd.openxmlformats-officedocument.wordprocessingml.document"}]
)
def test_anthropic_refuses_audio_and_other_files_for_good(part):
    with pytest.raises(ProviderError) as refused:
        _anthropic(_user(part))
    assert not refused.value.retryable


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((1024, 1024), 765),  # 768x768: 4 tiles
        ((2048, 4096), 1105),  # 1024x2048, then 768x1536: 2x3 tiles
        ((512, 512), 255),  # one tile, no scaling
        ((40, 30), 255),
        ((4096, 8192), 1105),  # 1024x2048 as above
        ((800, 600), 765),  # shortest side 600 <= 768: 2x2 tiles
    ],
)
def test_openai_image_rule(size, tokens):
    assert openai_image_tokens(*size) == tokens


def test_openai_low_detail_is_flat():
    assert openai_image_tokens(4000, 3000, detail="low") == 85


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((1000, 1000), 1334),  # 1,000,000 / 750 = 1333.3
        ((1568, 1568), 3279),  # 2,458,624 / 750 = 3278.2
        ((3136, 1568), 1640),  # long edge to 1568: 1568x784 = 1,229,312 / 750 = 1639.1
        ((40, 30), 2),
        ((3000, 1500), 1640),  # 1568x784 in integers (floats would give 1567x784)
    ],
)
def test_anthropic_image_rule(size, tokens):
    assert anthropic_image_tokens(*size) == tokens


def test_audio_counts_ten_tokens_a_second():
    assert audio_tokens(1510) == 16 and audio_tokens(1000) == 10 and audio_tokens(None) == 0


def test_media_tokens_of_a_request_by_its_provider():
    messages = [
        {"role": "system", "content": "Be brief."},
        *_user(IMAGE, WAV, PDF, TEXT),
        {"role": "assistant", "content": "A red square."},
        *_user({**IMAGE, "width": 40, "height": 30}),
    ]
    assert media_tokens(messages, "openai_compatible") == MediaTokens(
        image=765 + 255, audio=16, file=FILE_TOKENS_FLAT + 101
    )
    assert media_tokens(messages, "anthropic").image == 1399 + 2  # 1,048,576 / 750 = 1398.1
    # An unknown provider, or an image of unknown size, gets the flat figure.
    assert media_tokens(_user(IMAGE), None).image == IMAGE_TOKENS_FLAT
    no_size = {k: v for k, v in IMAGE.items() if k not in ("width", "height")}
    assert media_tokens(_user(no_size), "anthropic").image == IMAGE_TOKENS_FLAT


def test_estimates_count_parts_by_the_rule_and_never_a_reference_as_text():
    internal = _user(IMAGE)[0]
    text = estimate_tokens("What is this?")
    assert estimate_message_tokens(internal, provider="openai_compatible") == MESSAGE_OVERHEAD + text + 765
    assert estimate_message_tokens(internal, provider="anthropic") == MESSAGE_OVERHEAD + text + 1399
    # A provider's wire body (references, or the bytes once put in) counts only its text: the
    # model call adds the parts by the rule.
    for body in (_openai([internal]), _anthropic([internal])):
        assert estimate_message_tokens(body["messages"][0]) == MESSAGE_OVERHEAD + text
    inlined = {"role": "user", "content": [{"type": "text", "text": "What is this?"}]}
    inlined["content"].append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + "QUJD" * 5000}})
    assert estimate_message_tokens(inlined) == MESSAGE_OVERHEAD + text


def test_text_only_list_contents_are_counted_as_before():
    blocks = [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]
    assert estimate_message_tokens({"role": "user", "content": blocks}) == MESSAGE_OVERHEAD + estimate_tokens(blocks)
