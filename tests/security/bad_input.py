"""The routes of the site and the bad inputs every one of them must answer with a 4xx: shared by
the in-process tests and the ones against a live server."""

import json
import re

from django.urls import URLPattern, URLResolver, get_resolver

from evals.models import EvalCase, EvalRun, EvalSuite
from reviews.models import ReviewItem, ReviewQueue

# Every route outside the admin, with the methods it takes (GET implies HEAD). A new route must
# be added here: test_every_route_is_listed says so.
ROUTES = {
    "": {"GET"},  # the front door: links to every operator page
    "language/": {"POST"},  # the language switcher
    "workspace/": {"POST"},  # the workspace switcher
    "workspace/usage/": {"GET"},  # the current workspace's usage against its budgets
    "oidc/authenticate/": {"GET"},  # single sign-on: off to the provider
    "oidc/callback/": {"GET"},  # single sign-on: back from the provider
    "jsi18n/": {"GET"},  # the operator pages' scripts' strings
    "health/": None,  # any method: load balancers probe it
    "metrics": {"GET"},  # Prometheus scrapes: bearer token or a staff session
    "api/schema/": {"GET"},
    "api/docs/": {"GET"},
    "api/redoc/": {"GET"},  # moved to api/docs/: a permanent redirect
    "favicon.ico": {"GET"},
    "v1/chat/completions": {"POST"},
    "v1/models": {"GET"},
    "evals/compare/": {"GET"},
    "monitor/": {"GET"},
    "monitor/panel/": {"GET"},
    "monitor/data.json": {"GET"},
    "monitor/conversations/{conversation}/": {"GET"},  # a conversation's thread
    "monitor/runs/{run}/": {"GET"},
    "monitor/runs/{run}/timeline.json": {"GET"},
    "monitor/runs/{run}/events.json": {"GET"},
    "monitor/runs/{run}/eval-case/": {"POST"},
    "monitor/runs/{run}/compare/": {"GET"},
    "monitor/runs/{run}/fork/{step}/": {"POST"},
    "monitor/runs/{run}/{action}/": {"POST"},
    "monitor/attachments/{attachment}/": {"GET"},  # an attachment's download, for operators
    "monitor/try/": {"GET"},
    "monitor/agents/{agent}/": {"GET"},  # an agent's page
    "monitor/agents/{agent}/playground/": {"GET"},  # its prompt playground
    "monitor/agents/{agent}/playground/send/": {"POST"},
    "monitor/agents/{agent}/playground/save/": {"POST"},
    "monitor/agents/{agent}/playground/eval/": {"POST"},
    "monitor/agents/{agent}/release/": {"POST"},  # a release action from the agent's page
    "monitor/agents/{agent}/online/": {"GET"},  # its online scores
    "monitor/try/send/": {"POST"},
    "monitor/try/attachments/": {"POST"},  # one file for the try page's next message
    "api/v1/": {"GET"},
    "api/v1/runs/{run}/events/": {"GET"},
    "api/v1/agents/": {"GET"},
    "api/v1/agents/{agent}/": {"GET"},
    "api/v1/conversations/": {"GET", "POST"},
    "api/v1/conversations/{conversation}/": {"GET", "PATCH"},
    "api/v1/conversations/{conversation}/messages/": {"POST"},
    "api/v1/runs/": {"GET"},
    "api/v1/runs/export/": {"GET"},
    "api/v1/config-changes/export/": {"GET"},
    "api/v1/runs/{run}/": {"GET"},
    "api/v1/runs/{run}/cancel/": {"POST"},
    "api/v1/runs/{run}/steps/": {"GET"},
    "api/v1/approvals/": {"GET"},
    "api/v1/approvals/{approval}/": {"GET"},
    "api/v1/approvals/{approval}/decision/": {"POST"},
    "api/v1/eval-suites/": {"GET", "POST"},
    "api/v1/eval-suites/{suite}/": {"GET"},
    "api/v1/eval-suites/{suite}/cases/": {"GET", "POST"},
    "api/v1/eval-runs/": {"GET", "POST"},
    "api/v1/eval-runs/{eval_run}/": {"GET"},
    "api/v1/end-users/{end_user}/conversations/": {"GET"},
    "api/v1/end-users/{end_user}/runs/": {"GET"},
    "api/v1/end-users/{end_user}/memories/": {"GET"},
    "api/v1/end-users/{end_user}/memories/{memory}/": {"DELETE"},
    "api/v1/end-users/{end_user}/": {"DELETE"},  # forget the end user
    "api/v1/runs/{run}/feedback/": {"GET", "POST"},
    "api/v1/runs/{run}/fork/": {"POST"},
    "api/v1/attachments/": {"POST"},  # upload (multipart)
    "api/v1/attachments/{attachment}/": {"GET"},
    "api/v1/attachments/{attachment}/content/": {"GET"},  # the download
    "api/v1/hooks/{hook}/": {"POST"},  # signed by the hook's secret, not a token
    # The chat widget's API: an end-user token signed by the widget's secret, not an API token.
    "api/v1/widget/{widget}/conversations/": {"POST"},
    "api/v1/widget/{widget}/conversations/{conversation}/": {"GET"},
    "api/v1/widget/{widget}/conversations/{conversation}/messages/": {"POST"},
    "api/v1/widget/{widget}/attachments/": {"POST"},  # the end user's upload
    "api/v1/widget/{widget}/attachments/{attachment}/content/": {"GET"},  # the end user's download
    "api/v1/widget/{widget}/runs/{run}/events/": {"GET"},
    "widget.js": {"GET"},  # the widget's script, for other sites' pages
    "chat/{widget}/": {"GET"},  # the widget's hosted page
    # A chat service's callback, checked by the service's own rule; a GET only for a URL verification (WeCom).
    "chatbots/{chat_channel}/": {"GET", "POST"},
    "approvals/": {"GET"},
    "approvals/poll/": {"GET"},
    "approvals/history/": {"GET"},
    "approvals/{approval}/": {"GET"},
    "approvals/{approval}/decision/": {"POST"},
    "approvals/{approval}/preview/": {"POST"},
    "approvals/login/": {"GET", "POST", "PUT"},
    "approvals/logout/": {"POST"},
    "reviews/": {"GET"},  # the review queues
    "reviews/{review_queue}/": {"GET"},
    "reviews/{review_queue}/next/": {"POST"},  # claim the next run to review
    "reviews/items/{review_item}/": {"GET"},
    "reviews/items/{review_item}/label/": {"POST"},
    "reviews/items/{review_item}/release/": {"POST"},
    "reviews/items/{review_item}/case/": {"POST"},  # the reviewed run as an eval case
}
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
# Routes whose POST reads no body (an action on the row in the URL; the login form answers bad
# form input with the form again), so a bad body is not theirs to refuse.
NO_BODY = {
    "health/",
    "monitor/runs/{run}/{action}/",
    "api/v1/runs/{run}/cancel/",
    "api/v1/end-users/{end_user}/memories/{memory}/",
    "api/v1/end-users/{end_user}/",
    "approvals/login/",
    "approvals/logout/",
    "reviews/{review_queue}/next/",
    "reviews/items/{review_item}/release/",
}

_CONVERTERS = {
    "<int:pk>": "{approval}",
    "<uuid:run_id>": "{run}",
    "<slug:action>": "{action}",
    "<int:step>": "{step}",
    "<path:end_user>": "{end_user}",
    "<uuid:pk>": "{memory}",
    "<uuid:hook_id>": "{hook}",
    "<uuid:widget_id>": "{widget}",
    "<uuid:channel_id>": "{chat_channel}",
    "<uuid:conversation_id>": "{conversation}",
    "<uuid:attachment_id>": "{attachment}",
    "<slug:slug>": "{agent}",
    "<int:queue_id>": "{review_queue}",
    "<int:item_id>": "{review_item}",
}
_REGEX_GROUPS = re.compile(r"\(\?P<(\w+)>[^)]*\)")


def _route_text(pattern) -> str | None:
    text = str(pattern.pattern)
    if "(?P<format>" in text or "<drf_format_suffix:format>" in text:
        return None  # DRF's format suffixes: the same views again
    text = text.lstrip("^").rstrip("$").replace("\\.", ".")
    for converter, placeholder in _CONVERTERS.items():
        text = text.replace(converter, placeholder)
    return text


def site_routes() -> set[str]:
    """Every route of the URL configuration outside the admin, with placeholders for its ids."""
    found = set()

    def walk(patterns, prefix):
        for pattern in patterns:
            text = _route_text(pattern)
            if text is None or (prefix + text).startswith("admin/"):
                continue
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + text)
            elif isinstance(pattern, URLPattern):
                found.add(prefix + text)

    walk(get_resolver().url_patterns, "")
    return {_named(route) for route in found}


def _named(route: str) -> str:
    """DRF's regex groups named after the resource they select."""
    resource = {
        "agents": "agent",
        "conversations": "conversation",
        "runs": "run",
        "approvals": "approval",
        "eval-suites": "suite",
        "eval-runs": "eval_run",
    }

    def name(match):
        before = route[: match.start()].rstrip("/").rsplit("/", 1)[-1]
        return "{" + resource.get(before, match.group(1)) + "}"

    return _REGEX_GROUPS.sub(name, route)


DEEP = "[" * 100_000 + "]" * 100_000
MEDIUM = '{"a":' * 1000 + "1" + "}" * 1000
# json.dumps writes lone surrogates as \uXXXX escapes, as a client would.
SURROGATE_BODIES = {
    "value": json.dumps(
        {
            "model": "x",
            "agent": "\ud800",
            "content": "\udfff",
            "decision": "approve",
            "messages": [{"role": "user", "content": "\ud800"}],
        }
    ),
    "key": json.dumps({"\ud800": 1, "agent": "x", "content": "hi"}),
    "nested": json.dumps({"agent": "x", "metadata": {"a": [{"b": "\udc00"}]}, "arguments": {"label": ["\ud83d"]}}),
}
BAD_BODIES = {
    **{f"surrogate-{name}": body.encode() for name, body in SURROGATE_BODIES.items()},
    "invalid-utf8": b'{"content": "\xff\xfe", "agent": "\xed\xa0\x80"}',
    "deep-100000": DEEP.encode(),
    "deep-1000": MEDIUM.encode(),
    "huge-number": b'{"agent": "x", "metadata": {"n": 1e999}, "arguments": {"n": -1e999}}',
}
BAD_QUERY = (
    "agent=%ED%A0%80&status=%ff&tool=%ED%B0%80&page=%ED%A0%80&last_event_id=%ED%A0%80&hours=%ED%A0%80"
    # The runs lists' filters (conversations.run_filters).
    "&tag=%ED%A0%80&meta=%ff&source=%ff&cost_min=%ED%A0%80&duration_max=%ff&version=%ff"
)


def eval_ids(*, agent_version) -> dict:
    """A suite with a case and an eval run of it (never started), for the evaluation routes."""
    suite = EvalSuite.objects.create(name="bad-input")
    EvalCase.objects.create(suite=suite, name="c", turns=[{"role": "user", "content": "hi"}])
    eval_run = EvalRun.objects.create(suite=suite, agent_version=agent_version)
    return {"suite": suite.pk, "eval_run": eval_run.pk}


def review_ids(*, run) -> dict:
    """A review queue with the run as its item, for the review routes."""
    queue = ReviewQueue.objects.create(name="bad-input")
    item = ReviewItem.objects.create(queue=queue, run_id=run.pk, reason=ReviewItem.Reason.SAMPLE)
    return {"review_queue": queue.pk, "review_item": item.pk}


def assert_error_shape(route: str, body: dict) -> None:
    if route.startswith("v1/"):
        assert set(body) == {"error"} and isinstance(body["error"]["message"], str), body
    else:
        assert isinstance(body.get("message"), str) and body["message"] and isinstance(body.get("extra"), dict), body
