"""Structured logs: one run can be followed through web and worker logs by its ids."""

import io
import json
import logging

from django.conf import settings
from django.utils.module_loading import import_string

from platform_site.logs import ContextFilter, HumanFormatter, log_context


def _json_formatter():
    config = dict(settings.LOGGING["formatters"]["json"])
    return import_string(config.pop("()"))(**config)


def test_json_lines_carry_the_bound_ids():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_json_formatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("agentry.test.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with log_context(run_id="r-1", request_id="q-9"):
            with log_context(llm_call_id=7):
                logger.warning("model call %s failed", 7)
            logger.info("after the call")
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
    first, second, third = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "model call 7 failed" and first["level"] == "WARNING"
    assert first["logger"] == "agentry.test.json" and "time" in first
    assert (first["run_id"], first["llm_call_id"], first["request_id"]) == ("r-1", "7", "q-9")
    assert second["run_id"] == "r-1" and "llm_call_id" not in second
    assert "run_id" not in third


def test_human_lines_append_the_ids():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    with log_context(run_id="abc", tool_invocation_id=5):
        ContextFilter().filter(record)
    assert HumanFormatter().format(record).endswith("hello [run_id=abc tool_invocation_id=5]")
