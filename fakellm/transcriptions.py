"""A deterministic OpenAI-compatible `/v1/audio/transcriptions` (multipart: file, model).

The transcript is read from the clip itself, so a test decides what it says:
- a WAV with a chunk named `say ` (RIFF's other chunks are skipped by players and by the
  platform's duration reader) answers that chunk's UTF-8 text;
- any other WAV answers `audio {seconds:.1f} s`, its duration from the header;
- anything else answers `audio {n} bytes`.
The answer is `{"text": …}` (OpenAI's `response_format` json), with the duration in seconds
where known, as OpenAI's verbose answer has it.
"""

from __future__ import annotations

import struct

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

SAY_CHUNK = b"say "


def _wav_chunks(data: bytes) -> dict[bytes, bytes]:
    chunks: dict[bytes, bytes] = {}
    if not (data[:4] == b"RIFF" and data[8:12] == b"WAVE"):
        return chunks
    offset = 12
    while offset + 8 <= len(data):
        name, size = struct.unpack_from("<4sI", data, offset)
        chunks.setdefault(name, data[offset + 8 : offset + 8 + size])
        offset += 8 + size + (size & 1)
    return chunks


def transcript(data: bytes) -> dict:
    chunks = _wav_chunks(data)
    if SAY_CHUNK in chunks:
        return {"text": chunks[SAY_CHUNK].decode("utf-8", "replace").rstrip("\x00")}
    fmt, samples = chunks.get(b"fmt "), chunks.get(b"data")
    if fmt and len(fmt) >= 16 and samples is not None:
        byte_rate = struct.unpack_from("<I", fmt, 8)[0]
        seconds = len(samples) / byte_rate if byte_rate else 0.0
        return {"text": f"audio {seconds:.1f} s", "duration": round(seconds, 3)}
    return {"text": f"audio {len(data)} bytes"}


async def transcriptions(request: Request) -> Response:
    """The route: a model named `unavailable…` answers 503 every time (a test of retries and of
    a part that cannot be converted); the request is kept with the server's others."""
    try:
        form = await request.form()
    except (AssertionError, ValueError):
        return JSONResponse({"error": {"message": "expected a multipart form"}}, status_code=400)
    upload, model = form.get("file"), form.get("model")
    if upload is None or isinstance(upload, str) or not model:
        return JSONResponse({"error": {"message": "file and model are required"}}, status_code=400)
    data = await upload.read()
    state = request.app.state.fakellm
    with state.answering():
        state.requests.append(
            {"path": "/v1/audio/transcriptions", "model": model, "filename": upload.filename, "size": len(data)}
        )
        if str(model).startswith("unavailable"):
            return JSONResponse({"error": {"message": "transcription model unavailable"}}, status_code=503)
        return JSONResponse(transcript(data))
