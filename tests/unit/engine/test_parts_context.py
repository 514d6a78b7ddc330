"""A message's parts in the context (engine.context) and in a call's usage and cost
(engine.model_call): the descriptors after the text, a converted part as its text, the memory
block before a list content, image and audio tokens apart, audio at its own price."""

from decimal import Decimal

from agents.providers import LLMResponse, Usage
from agents.providers.media import MediaTokens
from conversations.models import Message
from engine.context import _assemble, message_to_wire
from engine.model_call import _attachments_sent, _with_media, call_cost

ID = "0b7e4c1e-4a55-4f6e-9a39-3c1a1b2c3d4e"
OTHER = "5d1f7a0e-1111-4c2b-8d8e-2f0e9b8c7a6d"
IMAGE = {
    "type": "image",
    "attachment": ID,
    "media_type": "image/png",
    "name": "a.png",
    "size": 9,
    "width": 4,
    "height": 3,
}
AUDIO = {
    "type": "audio",
    "attachment": OTHER,
    "media_type": "audio/wav",
    "name": "n.wav",
    "size": 9,
    "duration_ms": 900,
}


def _user(content="What is it?", parts=None):
    return Message(role=Message.Role.USER, content=content, parts=parts)


def test_a_text_message_is_sent_as_before():
    assert message_to_wire(_user()) == {"role": "user", "content": "What is it?"}


def test_a_message_with_parts_sends_its_text_then_its_parts():
    wire = message_to_wire(_user(parts=[IMAGE, AUDIO]))
    assert wire["content"] == [{"type": "text", "text": "What is it?"}, IMAGE, AUDIO]
    # No text: the parts alone.
    assert message_to_wire(_user("", parts=[IMAGE]))["content"] == [IMAGE]


def test_a_converted_part_is_sent_as_the_text_it_was_turned_into():
    converted = {OTHER: {"method": "transcription", "text": "Call me back at noon."}}
    wire = message_to_wire(_user(parts=[IMAGE, AUDIO]), converted=converted)
    assert wire["content"] == [
        {"type": "text", "text": "What is it?"},
        IMAGE,
        {"type": "text", "text": "[audio n.wav, transcription]\nCall me back at noon."},
    ]


def test_the_memory_block_opens_a_first_message_with_parts():
    memory = {"role": "user", "content": "You remember: likes tea."}
    first = message_to_wire(_user(parts=[IMAGE]))
    assembled = _assemble("Be brief.", "", [[first]], memory)
    assert assembled[1]["content"] == [
        {"type": "text", "text": "You remember: likes tea."},
        {"type": "text", "text": "What is it?"},
        IMAGE,
    ]
    # A text message keeps the memory in its string, as before.
    assert _assemble("", "", [[message_to_wire(_user())]], memory)[0]["content"] == (
        "You remember: likes tea.\n\nWhat is it?"
    )


def test_the_attachments_a_request_sends():
    messages = [{"role": "system", "content": "x"}, message_to_wire(_user(parts=[IMAGE, AUDIO]))]
    assert _attachments_sent(messages) == {ID, OTHER}


def _response(**usage):
    return LLMResponse("ok", [], "stop", Usage(**usage), {})


def test_media_tokens_join_a_reported_usage_apart():
    reported = _response(prompt_tokens=900, completion_tokens=10, total_tokens=910)
    usage = _with_media(reported, MediaTokens(image=765, audio=16)).usage
    assert (usage.prompt_tokens, usage.image_tokens, usage.audio_tokens, usage.total_tokens) == (900, 765, 16, 910)
    # The server's own audio count is believed.
    audio = _response(prompt_tokens=900, completion_tokens=10, audio_tokens=20, total_tokens=910)
    assert _with_media(audio, MediaTokens(image=765, audio=16)).usage.audio_tokens == 20


def test_an_estimated_usage_gains_the_parts_it_could_not_count():
    estimated = _response(prompt_tokens=30, completion_tokens=10, total_tokens=40, estimated=True)
    usage = _with_media(estimated, MediaTokens(image=765, audio=16, file=101)).usage
    assert (usage.prompt_tokens, usage.total_tokens, usage.image_tokens, usage.audio_tokens) == (912, 922, 765, 16)


PRICES = {
    "price_input_per_million": "1.0",
    "price_cached_input_per_million": "0.5",
    "price_output_per_million": "2.0",
}


def test_cost_of_a_text_call_is_unchanged():
    response = _response(prompt_tokens=100, completion_tokens=10, cached_tokens=40, total_tokens=110)
    assert call_cost(PRICES, response) == Decimal(60 * 1 + 40 * 0.5 + 10 * 2) / 1_000_000


def test_image_tokens_cost_as_input_and_audio_at_its_price():
    response = _response(
        prompt_tokens=1000, completion_tokens=10, image_tokens=765, audio_tokens=100, total_tokens=1010
    )
    # 900 input tokens (the image's 765 among them) at 1.0, 100 audio at 40.0, 10 out at 2.0.
    priced = {**PRICES, "price_audio_input_per_million": "40.0"}
    assert call_cost(priced, response) == Decimal(900 + 100 * 40 + 20) / 1_000_000
    # No audio price: audio tokens are input tokens.
    assert call_cost(PRICES, response) == Decimal(1000 + 20) / 1_000_000
