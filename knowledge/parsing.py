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
import resource
import signal
import time

from django.conf import settings
from django.utils.translation import gettext as _

from knowledge import ocr
from knowledge.extract import ExtractionFailed, sections_from_bytes
from knowledge.sections import Section, section_text
from tools.executors.sandbox import child_limits_apply

# One fork server per process, shared with the python tools' sandbox (which sets the same preload).
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(["tools.sandbox_preload"])


def _ocr_allowance(conn, ocr_cpu_seconds: int):
    """What the child does when it first reads a page by OCR: it raises its soft limits to the
    hard ones (OCR's allowance) and tells the parent, which then waits OCR's wall-clock limit."""

    def allow():
        resource.setrlimit(resource.RLIMIT_AS, (resource.getrlimit(resource.RLIMIT_AS)[1],) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (ocr_cpu_seconds, resource.getrlimit(resource.RLIMIT_CPU)[1]))
        conn.send(("ocr",))

    return allow


def _child(conn, data: bytes, filename: str, content_type: str, limits: dict, max_chars: int):
    # The same limits as the python tools' sandbox; the memory allowance comes on top of the
    # document's bytes the child was handed. The hard limits are OCR's allowance, the soft ones
    # the ordinary allowance, raised only when a page is read by OCR (its models need about 1 GB
    # and a dense page seconds of CPU): a document without a scan never gets more.
    with open("/proc/self/statm") as statm:
        start = int(statm.read().split()[0]) * resource.getpagesize()
    child_limits_apply(cpu_seconds=limits["ocr_cpu_seconds"], memory_bytes=limits["ocr_memory_bytes"])
    hard_as, hard_cpu = resource.getrlimit(resource.RLIMIT_AS)[1], resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_AS, (min(start + limits["memory_bytes"], hard_as), hard_as))
    resource.setrlimit(resource.RLIMIT_CPU, (min(limits["cpu_seconds"], hard_cpu), hard_cpu))
    ocr.before_first_use(_ocr_allowance(conn, limits["ocr_cpu_seconds"]))
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


def _outcome(receiver, started: float, limits: dict) -> tuple:
    """The child's last message; ("ocr",) on the way moves the deadline to OCR's."""
    deadline = started + limits["timeout"]
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not receiver.poll(remaining):
            raise ExtractionFailed(
                _("Reading the document took longer than its time limit (%(n)s s); it was stopped.")
                % {"n": limits["timeout"]}
            )
        try:
            outcome = receiver.recv()
        except EOFError:
            return ("died",)
        if outcome[0] != "ocr":
            return outcome
        limits.update(
            ocr=True,
            timeout=max(limits["timeout"], limits["ocr_timeout"]),
            cpu_seconds=limits["ocr_cpu_seconds"],
            memory_bytes=limits["ocr_memory_bytes"],
        )
        deadline = started + limits["timeout"]


def sections_from_bytes_limited(data: bytes, *, filename: str, content_type: str) -> tuple[str, list[Section]]:
    """(title found in the content or "", sections with their locations) of the file, read in a
    limited child process. Raises ExtractionFailed when the file cannot be read or passes a limit."""
    cpu_seconds = settings.AGENTRY_KNOWLEDGE_PARSE_CPU_SECONDS
    memory_bytes = settings.AGENTRY_KNOWLEDGE_PARSE_MEMORY_MB * 1024 * 1024
    limits = {
        "cpu_seconds": cpu_seconds,
        "memory_bytes": memory_bytes,
        "timeout": settings.AGENTRY_KNOWLEDGE_PARSE_TIMEOUT_SECONDS,
        "ocr_cpu_seconds": max(cpu_seconds, settings.AGENTRY_KNOWLEDGE_OCR_CPU_SECONDS),
        "ocr_memory_bytes": max(memory_bytes, settings.AGENTRY_KNOWLEDGE_OCR_MEMORY_MB * 1024 * 1024),
        "ocr_timeout": settings.AGENTRY_KNOWLEDGE_OCR_TIMEOUT_SECONDS,
    }
    max_chars = settings.AGENTRY_KNOWLEDGE_MAX_TEXT_CHARS
    receiver, sender = _context.Pipe(duplex=False)
    process = _context.Process(
        target=_child, args=(sender, data, filename, content_type, dict(limits), max_chars), daemon=True
    )
    process.start()
    sender.close()
    try:
        outcome = _outcome(receiver, time.monotonic(), limits)
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
            _("Reading the document needed more memory than its limit (%(n)s MB); it was stopped.")
            % {"n": limits["memory_bytes"] // (1024 * 1024)}
        )
    if process.exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise ExtractionFailed(
            _("Reading the document used more CPU time than its limit (%(n)s s); it was stopped.")
            % {"n": limits["cpu_seconds"]}
        )
    raise ExtractionFailed(
        _("The document's reader stopped unexpectedly (exit code %(code)s).") % {"code": process.exitcode}
    )
