"""Chat-app bot messages (notifications.chat_formats): each service's documented body and
signature, recomputed here from the services' documented algorithms, and hostile arguments
that must not become links, mentions or code-fence breaks."""

import base64
import hashlib
import hmac
import json
from urllib.parse import parse_qs, unquote_plus, urlsplit

import pytest

from notifications.chat_formats import (
    ARGUMENTS_MAX_CHARS,
    chat_message,
    chat_request,
    chat_response_error,
    email_text,
    host_allowed,
)

NOW = 1_700_000_000.25
LINK = "https://agentry.example.com/approvals/7/"
HOSTILE = {
    "to": "@all",
    "slack": "<!channel> <!here>",
    "link": "[x](http://evil)",
    "feishu": '<at user_id="all"></at>',
    "fence": "```\n# heading",
    "amp": "&lt;!channel&gt;",
}


def _run(**extra):
    return {"id": "run-1", "agent": "support", "status": "awaiting_approval", "stop_reason": "", **extra}


def _requested(arguments=None):
    event = {
        "approval_id": 7,
        "tool": "refund",
        "arguments": arguments if arguments is not None else {"amount": 120},
        "why": "rule matched",
        "expires_at": None,
    }
    return {"type": "approval.requested", "event": {"seq": 3, "payload": event}, "run": _run()}


def _decided(status="approved", channel="page"):
    event = {"approval_id": 7, "tool": "refund", "status": status, "channel": channel, "decided_by": "ana"}
    return {"type": "approval.decided", "event": {"seq": 4, "payload": event}, "run": _run()}


ALERT = {
    "type": "alert.firing",
    "alert": {
        "firing_id": 1,
        "rule": {"id": 2, "name": "Error rate", "kind": "error_rate", "agent": "support", "model_config": None},
        "value": "0.4",
        "threshold": "0.1",
        "resolved_value": None,
        "summary": "40% of runs failed",
        "started_at": "2026-12-06T10:00:00+00:00",
        "resolved_at": None,
    },
}


def _body(fmt, event_type, payload, secret="", link=LINK):
    message = chat_message(event_type=event_type, payload=payload, link=link)
    url, body = chat_request(
        fmt=fmt, url="https://hook.example/send?access_token=t", message=message, secret=secret, now=NOW
    )
    return url, json.loads(body)


def test_feishu_card_links_the_approval_and_is_signed_as_feishu_documents():
    url, body = _body("feishu", "approval.requested", _requested(), secret="s3cret")
    assert url == "https://hook.example/send?access_token=t"
    assert body["msg_type"] == "interactive"
    card = body["card"]
    assert "refund" in card["header"]["title"]["content"]
    text = card["elements"][0]["text"]
    assert text["tag"] == "lark_md" and "support" in text["content"] and '"amount": 120' in text["content"]
    [button] = card["elements"][1]["actions"]
    assert button["url"] == LINK
    # Feishu: base64(HMAC-SHA256(key="<timestamp>\n<secret>", message="")), timestamp in seconds.
    assert body["timestamp"] == "1700000000"
    expected = base64.b64encode(hmac.new(b"1700000000\ns3cret", b"", hashlib.sha256).digest()).decode()
    assert body["sign"] == expected


def test_feishu_without_a_secret_or_a_public_url_sends_an_unsigned_card_without_a_button():
    _, body = _body("feishu", "approval.requested", _requested(), link="")
    assert "sign" not in body and "timestamp" not in body
    assert [e["tag"] for e in body["card"]["elements"]] == ["div"]


def test_dingtalk_action_card_is_signed_in_the_query_as_dingtalk_documents():
    url, body = _body("dingtalk", "approval.requested", _requested(), secret="SECabc")
    assert body["msgtype"] == "actionCard"
    card = body["actionCard"]
    assert card["singleURL"] == LINK and card["singleTitle"] and "refund" in card["title"]
    assert '"amount": 120' in card["text"]
    query = parse_qs(urlsplit(url).query)
    assert query["access_token"] == ["t"] and query["timestamp"] == ["1700000000250"]
    # DingTalk: urlencode(base64(HMAC-SHA256(key=secret, message="<timestamp ms>\n<secret>"))).
    digest = hmac.new(b"SECabc", b"1700000000250\nSECabc", hashlib.sha256).digest()
    assert query["sign"] == [base64.b64encode(digest).decode()]
    raw_sign = urlsplit(url).query.split("sign=")[1]
    assert unquote_plus(raw_sign) == base64.b64encode(digest).decode()


def test_dingtalk_without_a_link_is_markdown_and_unsigned_without_a_secret():
    url, body = _body("dingtalk", "approval.decided", _decided(), link="")
    assert url == "https://hook.example/send?access_token=t"
    assert body["msgtype"] == "markdown" and "Approved" in body["markdown"]["title"]
    assert "ana" in body["markdown"]["text"]


def test_wecom_markdown_carries_the_link():
    _, body = _body("wecom", "approval.requested", _requested())
    assert body["msgtype"] == "markdown"
    assert f"]({LINK})" in body["markdown"]["content"] and "support" in body["markdown"]["content"]


def test_slack_blocks_have_a_fallback_text_and_a_link_button():
    _, body = _body("slack", "approval.requested", _requested())
    assert "refund" in body["text"]
    section, actions = body["blocks"]
    assert section["text"]["type"] == "mrkdwn" and "```" in section["text"]["text"]
    assert actions["elements"][0]["url"] == LINK


@pytest.mark.parametrize("status", ["approved", "rejected", "expired"])
@pytest.mark.parametrize("fmt", ["feishu", "dingtalk", "wecom", "slack"])
def test_a_decision_is_a_follow_up_naming_the_outcome(fmt, status):
    event_type = "approval.expired" if status == "expired" else "approval.decided"
    _, body = _body(fmt, event_type, _decided(status=status, channel="system" if status == "expired" else "page"))
    assert status[:6] in json.dumps(body, ensure_ascii=False).lower()


def test_a_run_wide_grant_has_no_follow_up_for_there_was_no_request():
    assert chat_message(event_type="approval.decided", payload=_decided(channel="run_grant")) is None


@pytest.mark.parametrize("fmt", ["feishu", "dingtalk", "wecom", "slack"])
def test_alerts_use_the_same_channels(fmt):
    _, body = _body(fmt, "alert.firing", ALERT)
    text = json.dumps(body, ensure_ascii=False)
    assert "Error rate" in text and "40% of runs failed" in text and "0.1" in text


@pytest.mark.parametrize("fmt", ["feishu", "dingtalk", "wecom", "slack"])
def test_hostile_arguments_cannot_mention_link_or_break_the_fence(fmt):
    payload = _requested(arguments=HOSTILE)
    payload["event"]["payload"]["why"] = "@all [click](http://evil) <!channel>"
    _, body = _body(fmt, "approval.requested", payload, link="")
    text = json.dumps(body, ensure_ascii=False)
    for forbidden in ("@all", "<!channel>", "<!here>", "](http", "http://evil", "<at", '"all">', "&lt;", "&gt;"):
        assert forbidden not in text, forbidden
    # Exactly one code block: the arguments' backticks cannot open or close another.
    assert text.count("```") == 2
    assert "\\n# heading" not in text


def test_long_arguments_are_cut_with_a_note():
    message = chat_message(
        event_type="approval.requested", payload=_requested(arguments={"blob": "x" * 5000}), link=LINK
    )
    assert len(message.code) < ARGUMENTS_MAX_CHARS + 100
    assert "more characters" in message.code


def test_service_errors_in_a_200_body_are_failures_and_rate_limits_are_retried():
    assert chat_response_error(fmt="feishu", text='{"code":0,"msg":"success"}') is None
    assert chat_response_error(fmt="feishu", text='{"StatusCode":0,"StatusMessage":"success"}') is None
    error, retryable = chat_response_error(fmt="feishu", text='{"code":19021,"msg":"sign match fail"}')
    assert "19021" in error and "sign match fail" in error and not retryable
    assert chat_response_error(fmt="dingtalk", text='{"errcode":0,"errmsg":"ok"}') is None
    assert chat_response_error(fmt="dingtalk", text='{"errcode":130101,"errmsg":"send too fast"}')[1]
    assert not chat_response_error(fmt="dingtalk", text='{"errcode":310000,"errmsg":"sign not match"}')[1]
    assert chat_response_error(fmt="wecom", text='{"errcode":45009,"errmsg":"api freq out of limit"}')[1]
    assert chat_response_error(fmt="wecom", text="<html>") == (
        "The service did not answer JSON: <html>",
        False,
    )
    assert chat_response_error(fmt="slack", text="ok") is None


def test_chat_urls_must_be_on_the_service_host_unless_allowlisted():
    assert host_allowed(fmt="slack", url="https://hooks.slack.com/services/T/B/x", allowlist=[])
    assert not host_allowed(fmt="slack", url="http://hooks.slack.com/services/T/B/x", allowlist=[])
    assert not host_allowed(fmt="slack", url="https://oapi.dingtalk.com/robot/send", allowlist=[])
    assert host_allowed(fmt="feishu", url="https://open.larksuite.com/open-apis/bot/v2/hook/x", allowlist=[])
    assert not host_allowed(fmt="wecom", url="https://qyapi.weixin.qq.com.evil.com/x", allowlist=[])
    assert host_allowed(fmt="wecom", url="http://127.0.0.1:8080/x", allowlist=["127.0.0.1"])
    assert host_allowed(fmt="wecom", url="http://127.0.0.1:8080/x", allowlist=["127.0.0.1:8080"])
    assert not host_allowed(fmt="wecom", url="http://127.0.0.1:8081/x", allowlist=["127.0.0.1:8080"])


def test_an_escalation_is_the_request_again_with_how_long_it_waited():
    payload = _requested(HOSTILE)
    payload["type"] = "approval.escalated"
    payload["event"]["payload"]["waited_minutes"] = 45
    message = chat_message(event_type="approval.escalated", payload=payload, link=LINK)
    assert message.title == "Approval waiting 45 minutes: refund"
    assert message.link == LINK and message.color == "red"
    assert ("Agent", "support") in message.facts and ("Why", "rule matched") in message.facts
    requested = chat_message(event_type="approval.requested", payload=_requested(HOSTILE), link=LINK)
    assert message.facts == requested.facts and message.code == requested.code
    _url, body = chat_request(fmt="feishu", url="https://open.feishu.cn/x", message=message, secret="", now=NOW)
    text = body.decode()
    assert "@all" not in text and "<!channel>" not in text and "](http" not in text


def test_email_text_is_plain_with_a_one_line_subject_and_the_arguments_as_written():
    arguments = {**HOSTILE, "crlf": "a\r\nBcc: x@evil.example\x00"}
    payload = _requested(arguments)
    payload["event"]["payload"]["tool"] = "refund\r\nBcc: x@evil.example"
    subject, body = email_text(chat_message(event_type="approval.requested", payload=payload, link=LINK))
    assert subject == "[Agentry] Approval needed: refund Bcc: x@evil.example"
    assert "Tool: refund Bcc: x@evil.example\n" in body and "Agent: support\n" in body
    # JSON-escaped arguments: no raw line break or NUL from the model reaches the body.
    assert json.dumps(HOSTILE["feishu"])[1:-1] in body and "\x00" not in body and "\r" not in body
    assert body.endswith(f"Open the approval: {LINK}\n")


def test_email_text_without_a_link_or_arguments_is_the_facts_only():
    subject, body = email_text(chat_message(event_type="alert.firing", payload=ALERT))
    assert subject == "[Agentry] Alert firing: Error rate"
    assert body.splitlines()[0] == "Summary: 40% of runs failed" and "http" not in body
