"""An audio clip's duration from its header, where that is cheap: WAV (byte rate and data size),
MP3 (the Xing/Info frame count of a VBR file, else the first frame's bit rate over the file's
length) and Ogg (the last page's granule position over the Opus or Vorbis sample rate). FLAC
and M4A are accepted with no duration (None)."""

import struct

_MP3_BITRATES = {
    1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


class AudioInvalid(ValueError):
    """The header the type promises is not there or makes no sense."""


def audio_duration_ms(data: bytes, media_type: str) -> int | None:
    if media_type == "audio/wav":
        return _wav(data)
    if media_type == "audio/mpeg":
        return _mp3(data)
    if media_type == "audio/ogg":
        return _ogg(data)
    return None


def _wav(data: bytes) -> int:
    offset, byte_rate = 12, None
    while offset + 8 <= len(data):
        chunk, size = struct.unpack_from("<4sI", data, offset)
        body = offset + 8
        if chunk == b"fmt ":
            if size < 16 or body + 16 > len(data):
                raise AudioInvalid("fmt")
            byte_rate = struct.unpack_from("<I", data, body + 8)[0]
        elif chunk == b"data":
            if not byte_rate:
                raise AudioInvalid("data before fmt")
            # A streamed WAV may say 0 or 0xFFFFFFFF: what is there counts.
            return int(min(size, len(data) - body) * 1000 / byte_rate)
        offset = body + size + (size & 1)
    raise AudioInvalid("no data chunk")


def _mp3(data: bytes) -> int:
    start = 0
    if data[:3] == b"ID3":
        if len(data) < 10:
            raise AudioInvalid("id3")
        size = data[6] << 21 | data[7] << 14 | data[8] << 7 | data[9]
        start = 10 + size
    if start + 4 > len(data) or data[start] != 0xFF or data[start + 1] & 0xE0 != 0xE0:
        raise AudioInvalid("no frame")
    b1, b2, b3 = data[start + 1], data[start + 2], data[start + 3]
    version, layer = (b1 >> 3) & 3, (b1 >> 1) & 3
    bitrate_index, rate_index = b2 >> 4, (b2 >> 2) & 3
    if version == 1 or layer != 1 or bitrate_index in (0, 15) or rate_index == 3:
        raise AudioInvalid("not layer III")
    mono = (b3 >> 6) == 3
    bitrate = _MP3_BITRATES[1 if version == 3 else 2][bitrate_index] * 1000
    rate = _MP3_RATES[version][rate_index]
    samples = 1152 if version == 3 else 576
    side = (17 if mono else 32) if version == 3 else (9 if mono else 17)
    xing = start + 4 + side
    if data[xing : xing + 4] in (b"Xing", b"Info") and len(data) >= xing + 12:
        flags, frames = struct.unpack_from(">II", data, xing + 4)
        if flags & 1:
            return int(frames * samples * 1000 / rate)
    return int((len(data) - start) * 8 * 1000 / bitrate)


def _ogg(data: bytes) -> int | None:
    if b"OpusHead" in data[:200]:
        rate = 48000
    elif (at := data.find(b"\x01vorbis", 0, 200)) >= 0 and at + 16 <= len(data):
        rate = struct.unpack_from("<I", data, at + 12)[0]
    else:
        return None
    last = data.rfind(b"OggS")
    if last < 0 or last + 14 > len(data) or not rate:
        raise AudioInvalid("ogg page")
    granule = struct.unpack_from("<q", data, last + 6)[0]
    return int(granule * 1000 / rate) if granule > 0 else None
