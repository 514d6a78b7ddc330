"""OpenAI Chat Completions user content: `image_url` (a data URL, or an http(s) URL that is
never fetched), `input_audio` (wav or mp3) and `file` parts. Errors name the part's `param`."""

from __future__ import annotations

from fakellm.media import MediaError, data_url, decoded, image_facts, mp3_seconds, wav_seconds
from fakellm.parts import (
    Part,
    PartError,
    RequestParts,
    audio_part,
    file_part,
    image_part,
    object_messages,
    openai_image_tokens,
    url_image_part,
)

AUDIO_FORMATS = {"wav": wav_seconds, "mp3": mp3_seconds}


def _image(block: dict, path: str) -> Part:
    spec = block.get("image_url")
    spec = {"url": spec} if isinstance(spec, str) else spec
    if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
        raise PartError(f"Missing required parameter: '{path}.image_url.url'.", param=f"{path}.image_url.url")
    detail = spec.get("detail") or "auto"
    if detail not in ("auto", "low", "high"):
        message = f"Invalid value: '{detail}'. Supported values are: 'auto', 'low', and 'high'."
        raise PartError(message, param=f"{path}.image_url.detail", code="invalid_value")
    url = spec["url"]
    if url.startswith(("http://", "https://")):
        return url_image_part()
    media_type, raw = data_url(url)
    if not media_type.startswith("image/"):
        message = f"Invalid MIME type {media_type!r}: only image types are supported in '{path}.image_url'."
        raise PartError(message, param=f"{path}.image_url.url", code="invalid_image_format")
    facts = image_facts(raw)
    return image_part(facts.width, facts.height, facts.colour, openai_image_tokens(facts.width, facts.height, detail))


def _audio(block: dict, path: str) -> Part:
    spec = block.get("input_audio")
    if not isinstance(spec, dict):
        raise PartError(f"Missing required parameter: '{path}.input_audio'.", param=f"{path}.input_audio")
    read = AUDIO_FORMATS.get(spec.get("format"))
    if read is None:
        message = f"Invalid value: {spec.get('format')!r}. Supported values are: 'wav' and 'mp3'."
        raise PartError(message, param=f"{path}.input_audio.format", code="invalid_value")
    seconds = read(decoded(spec.get("data")))
    return audio_part(seconds)


def _file(block: dict, path: str) -> Part:
    spec = block.get("file")
    if not isinstance(spec, dict):
        raise PartError(f"Missing required parameter: '{path}.file'.", param=f"{path}.file")
    data = spec.get("file_data")
    if not isinstance(data, str):
        # A file_id names an upload to OpenAI's files API, which this server does not have.
        raise PartError(f"Missing required parameter: '{path}.file.file_data'.", param=f"{path}.file.file_data")
    raw = data_url(data)[1] if data.startswith("data:") else decoded(data)
    return file_part(spec.get("filename"), len(raw))


_READERS = {"image_url": _image, "input_audio": _audio, "file": _file}


def _part(block, path: str) -> Part | None:
    if not isinstance(block, dict) or block.get("type", "text") == "text":
        return None
    read = _READERS.get(block.get("type"))
    if read is None:
        message = (
            f"Invalid value: {block.get('type')!r}. Supported values are: 'text', 'image_url', 'input_audio', "
            "and 'file'."
        )
        raise PartError(message, param=f"{path}.type", code="invalid_value")
    try:
        return read(block, path)
    except MediaError as exc:
        raise PartError(f"Invalid '{path}': {exc.message}", exc.status, path, "invalid_value")


def openai_parts(body: dict) -> RequestParts:
    by_message, stripped = {}, []
    for index, (position, message) in enumerate(object_messages(body)):
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            stripped.append(message)
            continue
        parts = [_part(block, f"messages[{position}].content[{j}]") for j, block in enumerate(content)]
        if any(parts):
            by_message[index] = tuple(part for part in parts if part)
            message = {**message, "content": [block for block, part in zip(content, parts) if part is None]}
        stripped.append(message)
    return RequestParts(by_message, (), {**body, "messages": stripped})
