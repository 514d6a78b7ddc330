"""The fake server's transcripts are read from the clip: a WAV's `say ` chunk, else its duration."""

import io
import struct
import wave

from fakellm.transcriptions import transcript


def _wav(seconds: float, rate: int = 8000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(rate)
        clip.writeframes(b"\x00\x00" * int(seconds * rate))
    return out.getvalue()


def test_a_clip_says_its_say_chunk_or_its_duration():
    clip = _wav(2.5)
    assert transcript(clip) == {"text": "audio 2.5 s", "duration": 2.5}
    said = clip + b"say " + struct.pack("<I", 6) + "你好".encode()
    assert transcript(said)["text"] == "你好"
    assert transcript(b"not audio") == {"text": "audio 9 bytes"}
