"""The fake server reads images, files and audio in user messages on both wires: raw wire
bodies posted to the in-process server. No Django involved."""

from __future__ import annotations

import base64
import io
import json
import struct

import httpx
import pytest
from PIL import Image

from fakellm.loader import load_default_scripts
from fakellm.testing import serve_in_thread

HTTP = httpx.Client(timeout=10)
ANTHROPIC_HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
SCRIPTED = {
    "scenarios": [{"match": r"^describe$", "steps": [{"content": "You sent:{last_user_parts}"}]}],
    "fallback": {"content": "{last_user_message}{last_user_parts}"},
}
SMALL_WINDOW = {"defaults": {"context_window": 500}, "fallback": {"content": "ok"}}


@pytest.fixture(scope="module")
def url():
    base_url, stop = serve_in_thread({**load_default_scripts(), "scripted": SCRIPTED, "small": SMALL_WINDOW})
    yield base_url
    stop()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png(width: int, height: int, colour=(255, 0, 0)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, "PNG")
    return buffer.getvalue()


def rgb_strip() -> bytes:
    """3x1: red, green, blue; the average colour is #555555."""
    image = Image.new("RGB", (3, 1))
    for x, colour in enumerate([(255, 0, 0), (0, 255, 0), (0, 0, 255)]):
        image.putpixel((x, 0), colour)
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def wav(seconds: float) -> bytes:
    """8 kHz 16-bit mono: 16000 bytes a second."""
    data = b"\0" * int(seconds * 16000)
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    chunks = b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


MP3 = (b"\xff\xfb\x90\x00" + b"\0" * 413) * 100  # 128 kbit/s: 41700 bytes, 2.60625 s
PDF = b"%PDF-1.4\n% a tiny document\n"  # 27 bytes


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def image_url(data: bytes, detail: str | None = None, media_type: str = "image/png") -> dict:
    spec = {"url": f"data:{media_type};base64,{b64(data)}"}
    return {"type": "image_url", "image_url": {**spec, "detail": detail} if detail else spec}


def input_audio(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}}


def openai_file(data: bytes, filename: str | None = "invoice.pdf") -> dict:
    spec = {"file_data": f"data:application/pdf;base64,{b64(data)}"}
    return {"type": "file", "file": {**spec, "filename": filename} if filename else spec}


def image_block(data: bytes, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": b64(data)}}


def pdf_block(data: bytes, title: str | None = None) -> dict:
    block = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64(data)}}
    return {**block, "title": title} if title else block


def text_document(value: str, title: str | None = None) -> dict:
    block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": value}}
    return {**block, "title": title} if title else block


def chat(url: str, content, model: str = "echo", history: list | None = None, **extra) -> httpx.Response:
    messages = [*(history or []), {"role": "user", "content": content}]
    return HTTP.post(f"{url}/v1/chat/completions", json={"model": model, "messages": messages, **extra})


def anthropic(url: str, content, model: str = "echo", history: list | None = None, **extra) -> httpx.Response:
    body = {"model": model, "max_tokens": 64, "messages": [*(history or []), {"role": "user", "content": content}]}
    return HTTP.post(f"{url}/v1/messages", json={**body, **extra}, headers=ANTHROPIC_HEADERS)


def openai_answer(response: httpx.Response) -> tuple[str, dict]:
    assert response.status_code == 200, response.text
    body = response.json()
    return body["choices"][0]["message"]["content"], body["usage"]


def anthropic_answer(response: httpx.Response) -> tuple[str, dict]:
    assert response.status_code == 200, response.text
    body = response.json()
    return "".join(block["text"] for block in body["content"]), body["usage"]


def test_openai_parts_are_answered_in_order_after_the_text(url):
    content = [
        text("look at"),
        image_url(rgb_strip()),
        input_audio(wav(1.5)),
        text("these"),
        openai_file(PDF),
        openai_file(b"a,b\n1,2\n", filename=None),
        {"type": "image_url", "image_url": {"url": "https://images.example.com/cat.png"}},
    ]
    answer, _ = openai_answer(chat(url, content))
    assert answer == (
        "look at\nthese"
        "\n[image 3x1 #555555]\n[audio 1.5 s]\n[file invoice.pdf 27 bytes]\n[file document 8 bytes]\n[image url]"
    )


def test_openai_usage_adds_each_part_by_the_published_rule(url):
    # Shortest side 1024 -> 768: 768x768, 2x2 tiles: 85 + 170*4.
    square = image_url(png(1024, 1024))
    # 4096x2048 -> 2048x1024 -> 1536x768, 3x2 tiles: 85 + 170*6.
    wide = image_url(png(4096, 2048), detail="high")
    low = image_url(png(4096, 2048), detail="low")
    cases = [
        (square, 765, None),
        (wide, 1105, None),
        (low, 85, None),
        (input_audio(wav(1.5)), 15, 15),  # 1500 ms / 100
        (input_audio(MP3, "mp3"), 27, 27),  # 2606 ms / 100, rounded up
        (openai_file(PDF), 7, None),  # 27 bytes / 4, rounded up
        ({"type": "image_url", "image_url": {"url": "https://images.example.com/cat.png"}}, 85, None),
    ]
    _, text_only = openai_answer(chat(url, [text("hi")]))
    assert "audio_tokens" not in text_only["prompt_tokens_details"]
    for part, tokens, audio in cases:
        _, usage = openai_answer(chat(url, [text("hi"), part]))
        assert usage["prompt_tokens"] == text_only["prompt_tokens"] + tokens
        assert usage["prompt_tokens_details"]["audio_tokens"] == (audio or 0)


def test_openai_audio_answers_its_duration(url):
    assert openai_answer(chat(url, [input_audio(MP3, "mp3")]))[0] == "\n[audio 2.6 s]"
    assert openai_answer(chat(url, [input_audio(wav(0.05))]))[0] == "\n[audio 0.1 s]"


def test_openai_streamed_answer_and_usage(url):
    response = chat(url, [text("hear"), input_audio(wav(1.0))], stream=True, stream_options={"include_usage": True})
    assert response.status_code == 200
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    answer = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert answer == "hear\n[audio 1.0 s]"
    assert chunks[-1]["usage"]["prompt_tokens_details"]["audio_tokens"] == 10


def test_anthropic_parts_are_answered_in_order(url):
    content = [
        text("read"),
        image_block(rgb_strip()),
        pdf_block(PDF, title="order form.pdf"),
        text_document("héllo"),
        {"type": "image", "source": {"type": "url", "url": "https://images.example.com/cat.png"}},
    ]
    answer, _ = anthropic_answer(anthropic(url, content))
    assert answer == "read\n[image 3x1 #555555]\n[file order form.pdf 27 bytes]\n[file document 6 bytes]\n[image url]"


def test_anthropic_usage_adds_each_part_by_the_published_rule(url):
    cases = [
        (image_block(png(1024, 1024)), 1399),  # 1048576 / 750 = 1398.1
        (image_block(png(3000, 1500)), 1640),  # 1568x784: 1229312 / 750 = 1639.1
        (image_block(png(200, 200)), 54),  # 40000 / 750 = 53.3
        (pdf_block(PDF), 7),  # 27 bytes / 4
        (text_document("héllo"), 2),  # 6 bytes of UTF-8 / 4
    ]
    _, text_only = anthropic_answer(anthropic(url, [text("hi")]))
    for part, tokens in cases:
        _, usage = anthropic_answer(anthropic(url, [text("hi"), part]))
        assert usage["input_tokens"] == text_only["input_tokens"] + tokens
        assert set(usage) == set(text_only)


def test_a_message_with_only_an_image_is_the_users_turn(url):
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "earlier"}]
    assert anthropic_answer(anthropic(url, [image_block(png(2, 2, (0, 0, 255)))], history=history))[0] == (
        "\n[image 2x2 #0000ff]"
    )
    assert openai_answer(chat(url, [image_url(png(2, 2, (0, 0, 255)))], history=history))[0] == "\n[image 2x2 #0000ff]"


def test_earlier_parts_cost_tokens_but_are_not_the_last_message(url):
    history = [
        {"role": "user", "content": [text("first"), image_url(png(512, 512))]},
        {"role": "assistant", "content": "seen"},
    ]
    plain_history = [{"role": "user", "content": [text("first")]}, {"role": "assistant", "content": "seen"}]
    answer, usage = openai_answer(chat(url, "again", history=history))
    _, plain = openai_answer(chat(url, "again", history=plain_history))
    assert answer == "again"
    assert usage["prompt_tokens"] == plain["prompt_tokens"] + 255  # one 512px tile


def test_an_image_in_a_tool_result_costs_tokens_but_is_not_the_users(url):
    def conversation(inner: list) -> list:
        return [
            {"role": "user", "content": "show me the chart"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "chart", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": inner}]},
        ]

    body = {"model": "echo", "max_tokens": 64, "messages": conversation([text("chart"), image_block(png(200, 200))])}
    plain = {**body, "messages": conversation([text("chart")])}
    answer, usage = anthropic_answer(HTTP.post(f"{url}/v1/messages", json=body, headers=ANTHROPIC_HEADERS))
    _, plain_usage = anthropic_answer(HTTP.post(f"{url}/v1/messages", json=plain, headers=ANTHROPIC_HEADERS))
    assert answer == "show me the chart"
    assert usage["input_tokens"] == plain_usage["input_tokens"] + 54


def test_scenarios_match_the_text_and_templates_name_the_parts(url):
    content = [text("describe"), image_url(png(4, 4, (1, 2, 3)))]
    assert openai_answer(chat(url, content, model="scripted"))[0] == "You sent:\n[image 4x4 #010203]"
    assert anthropic_answer(anthropic(url, [text("describe"), text_document("x")], model="scripted"))[0] == (
        "You sent:\n[file document 1 bytes]"
    )
    assert openai_answer(chat(url, "describe", model="scripted"))[0] == "You sent:"


def test_generic_mode_mentions_the_parts(url):
    answer, _ = openai_answer(chat(url, [text("what is this?"), image_url(rgb_strip())], model="generic"))
    assert answer == "No tools were offered, so I called none. Your message: what is this?\n[image 3x1 #555555]"


def test_the_context_window_counts_the_parts(url):
    assert chat(url, [text("hi"), image_url(png(512, 512))], model="small").status_code == 200
    response = chat(url, [text("hi"), image_url(png(1024, 1024))], model="small")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


def _image(url_: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url_}}


BAD_OPENAI = {
    "bad base64": ([_image("data:image/png;base64,not base64!")], "content[0]"),
    "not a data url": ([_image("ftp://example.com/x.png")], "content[0]"),
    "undecodable image": ([image_url(b"not an image at all")], "content[0]"),
    "truncated image": ([image_url(png(64, 64)[:60])], "content[0]"),
    "not an image type": ([image_url(PDF, media_type="application/pdf")], "content[0].image_url.url"),
    "bmp": ([image_url(b"BM" + b"\0" * 60, media_type="image/bmp")], "content[0]"),
    "bad detail": ([image_url(png(2, 2), detail="ultra")], "content[0].image_url.detail"),
    "unknown part": ([text("hi"), {"type": "video_url", "video_url": {"url": "x"}}], "content[1].type"),
    "ogg audio": ([input_audio(wav(1.0), fmt="ogg")], "content[0].input_audio.format"),
    "wav that is not": ([input_audio(MP3, fmt="wav")], "content[0]"),
    "audio without data": ([{"type": "input_audio", "input_audio": {"format": "wav"}}], "content[0]"),
    "file by id": ([{"type": "file", "file": {"file_id": "file-abc"}}], "content[0].file.file_data"),
    "file bad base64": ([{"type": "file", "file": {"file_data": "data:application/pdf;base64,%%%"}}], "content[0]"),
}


@pytest.mark.parametrize("case", BAD_OPENAI, ids=list(BAD_OPENAI))
def test_bad_openai_parts_are_400_in_openai_format(url, case):
    content, param = BAD_OPENAI[case]
    response = chat(url, content, history=[{"role": "system", "content": "s"}])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"].startswith(f"messages[1].{param}")
    assert error["message"]


BAD_ANTHROPIC = {
    "bad base64": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "@@@"}}],
    "undecodable image": [image_block(b"not an image at all")],
    "media type mismatch": [image_block(png(2, 2), media_type="image/jpeg")],
    "unsupported media type": [image_block(png(2, 2), media_type="image/bmp")],
    "audio": [text("hear"), input_audio(wav(1.0))],
    "openai image part": [image_url(png(2, 2))],
    "unknown block": [{"type": "video", "source": {}}],
    "pdf that is not": [pdf_block(b"hello")],
    "word document": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/msword", "data": b64(b"x")}}
    ],
    "document without source": [{"type": "document"}],
    "image in a tool result": [
        {"type": "tool_result", "tool_use_id": "t", "content": [image_block(b"garbage")]},
    ],
}


@pytest.mark.parametrize("case", BAD_ANTHROPIC, ids=list(BAD_ANTHROPIC))
def test_bad_anthropic_parts_are_400_in_anthropic_format(url, case):
    response = anthropic(url, BAD_ANTHROPIC[case])
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("messages.0.content.")


def test_a_part_over_20_mb_is_413_on_both_wires(url):
    huge = "A" * (28 * 1024 * 1024)  # 21 MB once decoded
    response = chat(url, [_image(f"data:image/png;base64,{huge}")])
    assert response.status_code == 413
    assert response.json()["error"]["param"] == "messages[0].content[0]"
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": huge}}
    response = anthropic(url, [block])
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"


def test_the_server_answers_after_refusing_a_part(url):
    assert chat(url, [image_url(b"junk")]).status_code == 400
    assert openai_answer(chat(url, [text("still here")]))[0] == "still here"
