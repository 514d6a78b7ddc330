"""kombu's filesystem transport (the embedded broker), with a message file that appears whole.

kombu 5.7's Channel._put opens the message file under its final name, then locks and writes it;
Channel._get lists the folder, moves any file with a queue's name and reads it without taking the
lock. A consumer polling while a producer is between the open and the write gets an empty or
half-written file, json.loads raises JSONDecodeError, and the worker stops with "Unrecoverable
error" (a burst of runs posted while an eval queues its own did it). Here the message is written
to a file whose name no reader picks up, then renamed to the name _get looks for: a rename within
one directory is atomic, so a reader sees no file or the whole one. Everything else, reading
included, is kombu's; tests/platform/test_fs_broker.py fails when the kombu surface relied on
(the file name _get matches, _put's signature, the bug itself) changes.
"""

import os
import tempfile
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

# Starts with a dot: _get, _size and _purge take the text after a name's first dot as
# "<queue>.msg", which "<random>.part" never is.
TEMP_PREFIX, TEMP_SUFFIX = ".", ".part"


def message_filename(queue: str) -> str:
    """The name kombu's _put gives a message: the milliseconds first, so that _get, which sorts
    the folder, hands messages out in the order they were written."""
    return f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        folder = self.data_folder_out
        final = os.path.join(folder, message_filename(queue))
        try:
            fd, temp = tempfile.mkstemp(dir=folder, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(temp, final)
        except BaseException as exc:
            try:
                os.unlink(temp)
            except OSError:
                pass
            if isinstance(exc, OSError):
                raise ChannelError(f"Cannot add file {final!r} to directory") from exc
            raise


class Transport(filesystem.Transport):
    Channel = Channel
