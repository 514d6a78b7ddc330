"""Variants of the classes of issue 39 tried again, each as an attacker would vary it: slow
patterns where a model chooses the text (tool and eval JSON Schemas), a guardrail check that
holds up other users' runs, a body sent a byte at a time. Each test failed before its fix."""

import asyncio
import io
import json
import random
import socket
import threading
from urllib.parse import urlsplit

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.urls import reverse

from engine import guardrails as engine_guardrails
from evals.matching import pattern_check, schema_errors
from evals.models import EvalCase, EvalSuite
from platform_site import outbound
from platform_site.green import spawn
from tests.conftest import _database_url
from tests.support.api import client_for
from tests.support.api_server import ApiServer
from tests.support.factories import ModelConfigFactory, make_agent, make_user, token_for
from tests.support.llm import agent_on
from tests.support.runs import advance, start_run
from tools.arguments import validate_arguments

# Exponential on a backtracking engine: 0.85 s at 24 characters, hours at 40.
EMAIL_PATTERN = r"^([a-z0-9]+\.?)+@example\.com$"
NEAR_MISS = "a" * 40 + "!"


# --- JSON Schema patterns run on a text a model chose ----------------------------------------


def test_a_backtracking_pattern_in_a_tool_schema_does_not_hang_the_worker():
    schema = {"type": "object", "properties": {"email": {"type": "string", "pattern": EMAIL_PATTERN}}}

    assert validate_arguments(schema, {"email": NEAR_MISS}) == [
        f"Argument 'email': {NEAR_MISS!r} does not match {EMAIL_PATTERN!r}."
    ]
    assert validate_arguments(schema, {"email": "li.lei@example.com"}) == []


def test_pattern_properties_and_additional_properties_match_keys_in_linear_time():
    schema = {
        "type": "object",
        "patternProperties": {r"^(x+)+$": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    }
    long_key = "x" * 5000 + "!"

    # The long key matches no pattern: it is an additional property, so it must be a string.
    assert validate_arguments({**schema, "additionalProperties": True}, {long_key: 1, "xxx": 2}) == []
    errors = validate_arguments(schema, {long_key: 1, "xxx": "two"})
    assert errors == [
        "Argument 'xxx': 'two' is not of type 'integer'.",
        f"Argument {long_key!r}: 1 is not of type 'string'.",
    ]


def test_a_pattern_re2_refuses_still_runs_with_a_time_limit():
    # A lookahead: RE2 cannot run it, the backtracking engine does, within its time limit.
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": r"^(?=.*[0-9])(a|aa)+$"}}}

    assert validate_arguments(schema, {"code": "a" * 60 + "!"}) != []
    assert validate_arguments(schema, {"code": "aa1"}) != []  # the digit is not an a
    assert (
        validate_arguments(
            {**schema, "properties": {"code": {"type": "string", "pattern": r"^(?=.*1)"}}}, {"code": "aa1"}
        )
        == []
    )


def test_an_eval_answer_schema_with_a_backtracking_pattern_is_scored_not_hung():
    schema = {"type": "object", "properties": {"email": {"type": "string", "pattern": EMAIL_PATTERN}}}

    assert schema_errors(schema, {"email": NEAR_MISS}) == [f"{NEAR_MISS!r} does not match {EMAIL_PATTERN!r}"]
    assert schema_errors(schema, {"email": "han.meimei@example.com"}) == []


# --- A long guardrail check does not hold up the worker's other runs ---------------------------


def test_a_long_guardrail_check_lets_the_loop_carry_other_runs():
    """A worker carries all its runs on one event loop (engine.reactor). A pattern that costs RE2
    seconds on a megabyte used to hold that loop for the whole check: every other user's run
    in the process waited (7.2 s for a one-word chat completion, measured on the live stack)."""
    rules = [{"id": 1, "kind": "blocked_pattern", "action": "flag", "side": "input", "pattern": r"(?s)x.{1000}!"}]
    # 100,000 characters of x, a and b and no "!": RE2's automaton cannot be cached for this
    # pattern and text, and it runs for 0.7 s of CPU (measured; a scan of no match, the slowest).
    letters = random.Random(39)
    texts = ["".join(letters.choice("xab") for _ in range(100_000))]
    seen_by_loop_during_scan = []

    async def main():
        ticks = 0

        async def other_run():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        ticking = asyncio.ensure_future(other_run())
        await asyncio.sleep(0.01)
        before = ticks
        found = await spawn(engine_guardrails._scanned, rules, texts)
        seen_by_loop_during_scan.append(ticks - before)
        ticking.cancel()
        return found

    assert asyncio.run(main()) == [[]]
    # Scanned on the loop's own thread, the loop could not tick once until the scan ended.
    assert seen_by_loop_during_scan[0] > 5


# --- A body trickled a byte at a time is refused, not waited for ------------------------------

BODY_SECONDS = 1.5


@pytest.fixture(scope="module")
def short_body_timeout_server(django_db_setup, django_db_blocker):
    if connection.vendor != "postgresql":
        pytest.skip("end-to-end tests need PostgreSQL (the test settings default to it)")
    server = ApiServer(
        database_url=_database_url() + "?application_name=agentry-body-timeout-web",
        name="body-timeout-web",
        env={"AGENTRY_BODY_TIMEOUT_SECONDS": str(BODY_SECONDS)},
    ).start()
    yield server
    server.stop()


def _trickle(server, path: str, *, chunked: bool) -> tuple[int, dict]:
    """Send a request's headers and the first byte of its body, then nothing: the status and the
    answer's JSON (before the fix no answer came: the socket's 30 s timeout raised)."""
    url = urlsplit(server.base_url)
    framing = "Transfer-Encoding: chunked" if chunked else "Content-Length: 1000"
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(head.encode() + (b"1\r\n{\r\n" if chunked else b"{"))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.django_db
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_that_never_ends_is_answered_408(short_body_timeout_server, chunked):
    status, body = _trickle(short_body_timeout_server, "/api/v1/conversations/", chunked=chunked)

    assert status == 408
    assert body == {
        "message": "The request body was not sent within 1.5 seconds.",
        "extra": {"seconds": BODY_SECONDS},
    }


@pytest.mark.django_db
def test_a_trickled_chat_completion_is_answered_in_openais_shape(short_body_timeout_server):
    status, body = _trickle(short_body_timeout_server, "/v1/chat/completions", chunked=True)

    assert status == 408
    assert body["error"] == {
        "message": "The request body was not sent within 1.5 seconds.",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_timeout",
    }


@pytest.mark.e2e
def test_a_stream_outlives_the_body_deadline(short_body_timeout_server, worker, fake_llm):
    """The deadline is the body's: once it is read, a streamed answer may take as long as it takes."""
    fake_llm.script("slow-stream", {"fallback": {"content": "慢慢来", "latency_ms": int(BODY_SECONDS * 2000)}})
    make_agent(slug="slow-stream", model_config=ModelConfigFactory(base_url=fake_llm.api_base, model="slow-stream"))
    request = {"model": "slow-stream", "stream": True, "messages": [{"role": "user", "content": "你好"}]}
    headers = {"Authorization": f"Bearer {token_for(make_user())}"}

    with httpx.stream(
        "POST", f"{short_body_timeout_server.base_url}/v1/chat/completions", json=request, headers=headers, timeout=60
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]

    assert response.status_code == 200
    assert lines[-1] == "data: [DONE]"
    text = "".join(
        choice["delta"].get("content") or ""
        for line in lines[:-1]
        for choice in json.loads(line[len("data: ") :])["choices"]
    )
    assert text == "慢慢来"


# --- System prompts: the timeline pages follow the export's rule -----------------------------

SECRET_PROMPT = "You are the payroll agent. Rule 7: salaries are confidential."


@pytest.mark.django_db
def test_the_run_timeline_shows_model_requests_only_to_those_who_may_read_agents(client, fake_llm, no_enqueue):
    """The export keeps a model call's request (the agent's system prompt and tools) from staff
    who may see runs but not agents; the timeline pages (console page, its JSON, the admin's
    run page and model call page) showed it to them all the same."""
    script = {"scenarios": [{"match": ".", "steps": [{"content": "the figures"}]}]}
    run = advance(start_run(agent_on(fake_llm, script, tools=(), system_prompt=SECRET_PROMPT)))
    assert run.status == "completed"
    pages = [
        reverse("monitoring:run", args=[run.pk]),
        reverse("monitoring:run-json", args=[run.pk]),
        reverse("admin:conversations_run_change", args=[run.pk]),
    ]
    call = run.llm_calls.get()
    pages.append(reverse("admin:conversations_llmcall_change", args=[call.pk]))
    operator = make_user(staff=True)
    operator.user_permissions.add(*Permission.objects.filter(codename__in=["view_run", "view_llmcall"]))
    client.force_login(operator)

    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        assert "the figures" in response.content.decode(), page  # the run's story is there
        assert "salaries are confidential" not in response.content.decode(), page

    operator.user_permissions.add(Permission.objects.get(codename="view_agent"))
    client.force_login(User.objects.get(pk=operator.pk))
    for page in pages:
        assert "salaries are confidential" in client.get(page).content.decode(), page


# --- An outbound answer trickled a byte at a time ends at the request's timeout -------------


@pytest.fixture
def trickling_server():
    """Answers every request with a 100 kB body's headers, then one byte every 0.2 s."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def answer(conn):
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
            while not stop.wait(0.2):
                try:
                    conn.sendall(b"a")
                except OSError:
                    return

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/page"
    stop.set()
    listener.close()


def test_a_trickled_answer_is_cut_off_at_the_timeout(trickling_server):
    """httpx's timeouts bound each read: a server (a page a model asked a tool to fetch, a URL
    document, a webhook receiver) sending a byte now and then held the worker's thread for ever
    (500 s for this body). The suite's allowlist lets the guard reach loopback."""
    # Each byte arrives well within httpx's per-read timeout: only a deadline on the whole
    # answer raises here (without one the read goes on until the 100 kB have trickled in).
    with pytest.raises(httpx.ReadTimeout):
        outbound.guarded_request("GET", trickling_server, timeout_seconds=1)


# --- Eval patterns that the regex engine takes minutes to compile, or cannot -----------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "where, pattern, why",
    [
        ("answer_pattern", "a{1000000000}", "unroll to more than 100000"),
        ("answer_pattern", "((a{1000}){1000}){1000}", "unroll to more than 100000"),
        ("expected_tool_calls", "(" * 2400 + ")" * 2400, "nested too deeply"),
        ("expected_tool_calls", "b{99999999}", "unroll to more than 100000"),
    ],
    ids=["huge-count", "nested-counts", "deep-groups", "arguments-pattern"],
)
def test_the_api_refuses_eval_patterns_that_would_hang_or_crash_the_request(where, pattern, why):
    # Before: the request compiled a{1000000000} for minutes (a web thread held), and deep
    # groups raised RecursionError (a 500).
    suite = EvalSuite.objects.create(name="patterns")
    user = make_user()
    user.user_permissions.add(Permission.objects.get(codename="add_evalcase"))
    case = {"name": "c", "turns": [{"role": "user", "content": "hi"}]}
    if where == "answer_pattern":
        case["answer_pattern"] = pattern
    else:
        case["expected_tool_calls"] = [{"name": "lookup", "arguments_pattern": pattern}]

    response = client_for(user).post(f"/api/v1/eval-suites/{suite.pk}/cases/", case, format="json")

    assert response.status_code == 400
    assert why in json.dumps(response.json()["extra"]["fields"][where])
    assert not EvalCase.objects.exists()


def test_ordinary_eval_patterns_are_still_accepted():
    for pattern in [r"^\d{3}-\d{4}$", r"(?i)订单\s*[0-9]{6,12}", r"(a{1000}){100}", r"\{1000000000\}", r"[a{9}]+"]:
        pattern_check(pattern)


# --- A form body with thousands of parts gets the API's error shape ---------------------------


@pytest.mark.django_db
def test_a_form_body_with_too_many_fields_or_files_is_an_api_error_not_a_page():
    api = client_for(make_user())
    fields = {f"field{i}": "x" for i in range(1001)}
    files = {f"file{i}": io.BytesIO(b"x") for i in range(101)}

    for data, message in [
        (fields, "The request has more than 1000 fields."),
        (files, "The request has more than 100 files."),
    ]:
        response = api.post("/api/v1/conversations/", data, format="multipart")
        # Before: Django's HTML "Bad Request (400)" page.
        assert response.status_code == 400
        assert response.json() == {"message": message, "extra": {}}
