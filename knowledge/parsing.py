"""Reading an untrusted document in a child process with CPU-time, memory and output limits.

A small file can cost without bound to parse: a 10 KB PDF of a million text operators takes
half a minute of CPU, a 78 KB one inflates to 80 MB. So documents are parsed only on the worker
(the indexing task), and there in a child process, the way the python tools' sandbox runs the
calculator (tools/executors/sandbox.py): forked from the same fork server (Django preloaded, no
lock of another thread inherited), with setrlimit on CPU time and address space, killed when
its wall-clock timeout passes. Whatever the file does, the worker gets a title and sections of text or an
ExtractionFailed whose message says which limit was passed; the document is marked failed with it.
"""

import multiprocessing
import signal

from django.conf import settings
from django.utils.translation import gettext as _

from knowledge.extract import IMAGE, PDF, ExtractionFailed, file_kind, sections_from_bytes
from knowledge.sections import Section, section_text
from tools.executors.sandbox import child_limits_apply

# One fork server per process, shared with the python tools' sandbox (which sets the same preload).
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(["tools.sandbox_preload"])


def _child(conn, data: bytes, filename: str, content_type: str, cpu_seconds: int, memory_bytes: int, max_chars: int):
    # The same limits as the python tools' sandbox; the memory allowance comes on top of the
    # document's bytes the child was handed.
    child_limits_apply(cpu_seconds=cpu_seconds, memory_bytes=memory_bytes)
    try:
        title, sections = sections_from_bytes(data, filename=filename, content_type=content_type)
        if sum(len(section_text(section)) + 2 for section in sections) - 2 > max_chars:
            conn.send(("failed", _("The document's text is longer than %(n)s characters.") % {"n": max_chars}))
        else:
            conn.send(("ok", title, sections))
    except ExtractionFailed as exc:
        conn.send(("failed", str(exc)))
    except MemoryError:
        conn.send(("memory", ""))
    except Exception as exc:  # any other parser failure is the file's: reported, not raised
        conn.send(("failed", _("The file cannot be read: %(error)s") % {"error": f"{type(exc).__name__}: {exc}"}))
    finally:
        conn.close()


def _memory_mb(data: bytes, filename: str, content_type: str) -> int:
    """The child's memory allowance: more for a file OCR may read (an image, a PDF whose pages
    may be scans), whose models need about 1 GB of address space."""
    try:
        kind = file_kind(filename=filename, content_type=content_type, head=data[:8])
    except ExtractionFailed:
        kind = ""  # the child reports it
    memory_mb = settings.AGENTRY_KNOWLEDGE_PARSE_MEMORY_MB
    return max(memory_mb, settings.AGENTRY_KNOWLEDGE_OCR_MEMORY_MB) if kind in (PDF, IMAGE) else memory_mb


def sections_from_bytes_limited(data: bytes, *, filename: str, content_type: str) -> tuple[str, list[Section]]:
    """(title found in the content or "", sections with their locations) of the file, read in a
    limited child process. Raises ExtractionFailed when the file cannot be read or passes a limit."""
    cpu_seconds = settings.AGENTRY_KNOWLEDGE_PARSE_CPU_SECONDS
    memory_mb = _memory_mb(data, filename, content_type)
    timeout = settings.AGENTRY_KNOWLEDGE_PARSE_TIMEOUT_SECONDS
    max_chars = settings.AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS
    receiver, sender = _context.Pipe(duplex=False)
    process = _context.Process(
        target=_child,
        args=(sender, data, filename, content_type, cpu_seconds, memory_mb * 1024 * 1024, max_chars),
        daemon=True,
    )
    process.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            raise ExtractionFailed(
                _("Reading the document took longer than its time limit (%(n)s s); it was stopped.") % {"n": timeout}
            )
        try:
            outcome = receiver.recv()
        except EOFError:
            outcome = ("died",)
    finally:
        receiver.close()
        if process.is_alive():
            process.kill()
        process.join()
    if outcome[0] == "ok":
        return outcome[1], outcome[2]
    if outcome[0] == "failed":
        raise ExtractionFailed(outcome[1])
    if outcome[0] == "memory":
        raise ExtractionFailed(
            _("Reading the document needed more memory than its limit (%(n)s MB); it was stopped.") % {"n": memory_mb}
        )
    if process.exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise ExtractionFailed(
            _("Reading the document used more CPU time than its limit (%(n)s s); it was stopped.") % {"n": cpu_seconds}
        )
    raise ExtractionFailed(
        _("The document's reader stopped unexpectedly (exit code %(code)s).") % {"code": process.exitcode}
    )
