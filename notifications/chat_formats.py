"""Webhook deliveries as chat-app bot messages: Feishu/Lark, DingTalk, WeCom and Slack.

Pure functions (no database, no network): `chat_message` turns a delivery's event and payload
into a neutral message, `chat_request` renders it as the body (and URL) the service documents,
signed with the bot's secret where the service signs, and `chat_response_error` reads the
service's answer, which reports failures in a 200 body.

Arguments, outputs, summaries and reasons are model or user text, so every such value goes
through `_neutral` and the service's own escaping: it can never become a link, a mention
(@all, <!channel>, <at user_id="all">), a closed code fence or a heading. The approver follows
the link to the approval's page, where the exact arguments are shown and where deciding still
needs a login; the message itself decides nothing.

Incoming-webhook bots cannot edit a message they sent, so a decision is a second message (a
follow-up) to the same webhook, not an update of the first card.
"""

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass, field
from urllib.parse import quote_plus, urlsplit

from django.utils.translation import gettext as _

from conversations.events import EventType

FEISHU, DINGTALK, WECOM, SLACK = "feishu", "dingtalk", "wecom", "slack"
CHAT_FORMATS = (FEISHU, DINGTALK, WECOM, SLACK)

# The hosts each service's incoming webhooks live on. Another host (a private relay, a test's
# local receiver) must be in AGENTRY_WEBHOOK_ALLOWLIST.
SERVICE_HOSTS = {
    FEISHU: ("open.feishu.cn", "open.larksuite.com"),
    DINGTALK: ("oapi.dingtalk.com",),
    WECOM: ("qyapi.weixin.qq.com",),
    SLACK: ("hooks.slack.com",),
}

ARGUMENTS_MAX_CHARS = 1500

# The approval events a chat message follows; a decision made by an earlier run-wide grant had
# no request message, so it gets no follow-up.
APPROVAL_REQUESTED = EventType.APPROVAL_REQUESTED
# A request still pending after the agent's escalation time, sent to the escalation channels.
APPROVAL_ESCALATED = EventType.APPROVAL_ESCALATED
APPROVAL_SETTLED = (EventType.APPROVAL_DECIDED, EventType.APPROVAL_EXPIRED)
GRANT_CHANNEL = "run_grant"

# Service codes in a 200 answer that mean "too many messages, try later" (DingTalk: 130101,
# "send too fast"; WeCom: 45009, "api freq out of limit"). Any other non-zero code is permanent.
RATE_LIMIT_CODES = {DINGTALK: {130101}, WECOM: {45009}}


@dataclass
class ChatMessage:
    title: str
    facts: list[tuple[str, str]] = field(default_factory=list)  # (label, untrusted value)
    code: str = ""  # untrusted text shown as a block (arguments, output)
    link: str = ""  # the approval's page; empty when no public URL is configured
    link_label: str = ""
    color: str = "blue"  # a Feishu card header template: blue, orange, green, red or grey


def host_allowed(*, fmt: str, url: str, allowlist: list[str]) -> bool:
    """Whether a chat-format webhook's URL is on its service's host (over https), or on a host an
    operator allowlisted ("host" or "host:port", as AGENTRY_WEBHOOK_ALLOWLIST is written)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".")
    if parts.scheme == "https" and host in SERVICE_HOSTS[fmt]:
        return True
    port = str(parts.port or (443 if parts.scheme == "https" else 80))
    return any(_entry_matches(entry, host, port) for entry in allowlist)


def _entry_matches(entry: str, host: str, port: str) -> bool:
    # Read as platform_site.netguard reads the same setting: "host", "host:port", "[v6]:port".
    entry = entry.strip().lower()
    if entry.startswith("["):
        entry_host, _sep, rest = entry[1:].partition("]")
        entry_port = rest.removeprefix(":")
    elif entry.count(":") == 1:
        entry_host, entry_port = entry.split(":")
    else:
        entry_host, entry_port = entry, ""
    return entry_host.rstrip(".") == host and (not entry_port or entry_port == port)


def _neutral(text: str) -> str:
    """Untrusted text with every character that starts a mention, a link, a tag, an entity or a
    code span replaced by a look-alike that no chat app parses. Look-alikes rather than each
    service's escapes: DingTalk and WeCom document none, and the approval page shows the exact text.
    With &, < and > gone, Slack's required escaping is satisfied too."""
    return (
        str(text)
        .replace("&", "＆")
        .replace("@", "＠")
        .replace("<", "＜")
        .replace(">", "＞")
        .replace("[", "［")
        .replace("]", "］")
        .replace("`", "ˋ")
        .replace("://", "：//")
        .replace("#", "＃")
    )


def _cut(text: str) -> str:
    if len(text) <= ARGUMENTS_MAX_CHARS:
        return text
    more = len(text) - ARGUMENTS_MAX_CHARS
    return (
        text[:ARGUMENTS_MAX_CHARS] + "\n" + _("… %(count)s more characters: see the approval page.") % {"count": more}
    )


def arguments_text(arguments) -> str:
    """The arguments as indented JSON, cut (also the escalation email's text)."""
    return _cut(json.dumps(arguments, ensure_ascii=False, indent=2, sort_keys=True))


def chat_message(*, event_type: str, payload: dict, link: str = "") -> ChatMessage | None:
    """The message for one delivery (its event type and the payload Agentry's own format posts),
    or None for an event a chat app is not told about."""
    if event_type.startswith("alert."):
        return _alert_message(event_type, payload["alert"])
    event = payload["event"]["payload"]
    run = payload["run"]
    run_facts = [(_("Agent"), run["agent"]), (_("Run"), run["id"])]
    if event_type in (APPROVAL_REQUESTED, APPROVAL_ESCALATED):
        facts = [(_("Tool"), event["tool"]), *run_facts]
        if event.get("why"):
            facts.append((_("Why"), event["why"]))
        if event.get("expires_at"):
            facts.append((_("Expires"), event["expires_at"]))
        if event_type == APPROVAL_ESCALATED:
            title = _("Approval waiting %(minutes)s minutes: %(tool)s") % {
                "minutes": event["waited_minutes"],
                "tool": event["tool"],
            }
        else:
            title = _("Approval needed: %(tool)s") % {"tool": event["tool"]}
        return ChatMessage(
            title=title,
            facts=facts,
            code=arguments_text(event.get("arguments") or {}),
            link=link,
            link_label=_("Open the approval"),
            color="red" if event_type == APPROVAL_ESCALATED else "orange",
        )
    if event_type in APPROVAL_SETTLED:
        if event.get("channel") == GRANT_CHANNEL:
            return None
        status = event["status"]
        titles = {
            "approved": _("Approved: %(tool)s"),
            "rejected": _("Rejected: %(tool)s"),
            "expired": _("Approval expired: %(tool)s"),
        }
        title = titles.get(status, _("Approval settled: %(tool)s")) % {"tool": event["tool"]}
        facts = [(_("Tool"), event["tool"]), *run_facts]
        if event.get("decided_by"):
            facts.append((_("Decided by"), event["decided_by"]))
        if event.get("reason"):
            facts.append((_("Reason"), event["reason"]))
        color = {"approved": "green", "rejected": "red"}.get(status, "grey")
        return ChatMessage(
            title=title, facts=facts, link=link, link_label=_("Open the approval") if link else "", color=color
        )
    if event_type.startswith("run."):
        facts = [*run_facts, (_("Status"), run["status"])]
        if run.get("stop_reason"):
            facts.append((_("Stop reason"), run["stop_reason"]))
        color = "green" if run["status"] == "completed" else "red"
        return ChatMessage(
            title=_("Run %(status)s: %(agent)s") % {"status": run["status"], "agent": run["agent"]},
            facts=facts,
            code=_cut(run.get("output") or ""),
            color=color,
        )
    return None


def _alert_message(event_type: str, alert: dict) -> ChatMessage:
    rule = alert["rule"]
    firing = event_type == "alert.firing"
    template = _("Alert firing: %(rule)s") if firing else _("Alert resolved: %(rule)s")
    facts = [(_("Summary"), alert["summary"]), (_("Value"), alert["value"]), (_("Threshold"), alert["threshold"])]
    if rule.get("agent"):
        facts.append((_("Agent"), rule["agent"]))
    facts.append((_("Since"), alert["started_at"]))
    if alert.get("resolved_at"):
        facts.append((_("Resolved"), alert["resolved_at"]))
    return ChatMessage(title=template % {"rule": rule["name"]}, facts=facts, color="red" if firing else "green")


# Rendering, one function per service.


def _fact(text) -> str:
    # One line: a line break in a value would let it start a heading, a quote or a list.
    return _neutral(" ".join(str(text).split()))


def _markdown(message: ChatMessage) -> str:
    lines = [f"**{_fact(label)}:** {_fact(value)}" for label, value in message.facts]
    if message.code:
        lines.append("```\n" + _neutral(message.code) + "\n```")
    return "\n".join(lines)


# C0 and C1 controls and the Unicode line separators (as alerts.models reads them), but not the
# line feed that separates a plain-text body's lines.
_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text) -> str:
    return " ".join(_CONTROLS.sub(" ", str(text)).split())


def email_text(message: ChatMessage) -> tuple[str, str]:
    """(subject, body) of the email webhook format: plain text, sent as text/plain with no HTML
    part, so the model's text is shown as written and nothing in it is rendered as markup. The
    subject is one line (a header a line break would split); every fact is one line."""
    subject = "[Agentry] " + _one_line(message.title)
    lines = [f"{_one_line(label)}: {_one_line(value)}" for label, value in message.facts]
    if message.code:
        lines += ["", _CONTROLS.sub(" ", message.code)]
    if message.link:
        lines += ["", f"{_one_line(message.link_label)}: {message.link}"]
    return subject, "\n".join(lines) + "\n"


def _feishu(message: ChatMessage, secret: str, now: float) -> tuple[str, dict]:
    text = _markdown(message)
    elements: list[dict] = [{"tag": "div", "text": {"tag": "lark_md", "content": text}}]
    if message.link:
        button = {"tag": "button", "text": {"tag": "plain_text", "content": message.link_label}, "type": "primary"}
        elements.append({"tag": "action", "actions": [{**button, "url": message.link}]})
    card = {
        "config": {"wide_screen_mode": True},
        "header": {"title": {"tag": "plain_text", "content": _neutral(message.title)}, "template": message.color},
        "elements": elements,
    }
    body: dict = {"msg_type": "interactive", "card": card}
    if secret:
        timestamp = str(int(now))
        body = {"timestamp": timestamp, "sign": feishu_sign(secret=secret, timestamp=timestamp), **body}
    return "", body


def feishu_sign(*, secret: str, timestamp: str) -> str:
    """Feishu's documented custom-bot signature: the key is "<timestamp>\\n<secret>", the
    message empty."""
    mac = hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()


def dingtalk_sign(*, secret: str, timestamp: str) -> str:
    """DingTalk's documented robot signature: HMAC-SHA256 of "<timestamp>\\n<secret>" keyed by
    the secret, base64 then URL-encoded."""
    mac = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256)
    return quote_plus(base64.b64encode(mac.digest()).decode())


def _dingtalk(message: ChatMessage, secret: str, now: float) -> tuple[str, dict]:
    title = _neutral(message.title)
    text = f"### {title}\n\n" + _markdown(message).replace("\n", "\n\n")
    if message.link:
        card = {"title": title, "text": text, "singleTitle": message.link_label, "singleURL": message.link}
        body = {"msgtype": "actionCard", "actionCard": card}
    else:
        body = {"msgtype": "markdown", "markdown": {"title": title, "text": text}}
    query = ""
    if secret:
        timestamp = str(int(now * 1000))
        query = f"timestamp={timestamp}&sign={dingtalk_sign(secret=secret, timestamp=timestamp)}"
    return query, body


def _wecom(message: ChatMessage, secret: str, now: float) -> tuple[str, dict]:
    content = f"**{_neutral(message.title)}**\n" + _markdown(message)
    if message.link:
        content += f"\n[{message.link_label}]({message.link})"
    return "", {"msgtype": "markdown", "markdown": {"content": content}}


def _slack(message: ChatMessage, secret: str, now: float) -> tuple[str, dict]:
    title = _neutral(message.title)
    lines = [f"*{title}*"]
    lines += [f"*{_fact(label)}:* {_fact(value)}" for label, value in message.facts]
    if message.code:
        lines.append("```" + _neutral(message.code) + "```")
    blocks: list[dict] = [{"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}}]
    if message.link:
        button = {"type": "button", "text": {"type": "plain_text", "text": message.link_label}, "url": message.link}
        blocks.append({"type": "actions", "elements": [button]})
    return "", {"text": title, "blocks": blocks}


_RENDERERS = {FEISHU: _feishu, DINGTALK: _dingtalk, WECOM: _wecom, SLACK: _slack}


def chat_request(*, fmt: str, url: str, message: ChatMessage, secret: str, now: float) -> tuple[str, bytes]:
    """The URL to POST to and the JSON body, for the service `fmt`, signed with `secret` when
    the service signs (Feishu/Lark in the body, DingTalk in the query string) and it is set."""
    query, body = _RENDERERS[fmt](message, secret, now)
    if query:
        url += ("&" if urlsplit(url).query else "?") + query
    return url, json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def chat_response_error(*, fmt: str, text: str) -> tuple[str, bool] | None:
    """(error, retryable) when a 2xx answer reports a failure in its body, else None.

    Feishu/Lark answers {"code": 0} (older bots {"StatusCode": 0}); DingTalk and WeCom
    {"errcode": 0}; Slack a plain "ok" (its failures come with a 4xx status)."""
    if fmt == SLACK:
        return None
    try:
        answer = json.loads(text)
    except ValueError:
        return _("The service did not answer JSON: %(text)s") % {"text": text[:200]}, False
    if not isinstance(answer, dict):
        return _("The service did not answer JSON: %(text)s") % {"text": text[:200]}, False
    if fmt == FEISHU:
        code = answer.get("code", answer.get("StatusCode", 0))
        detail = answer.get("msg") or answer.get("StatusMessage") or ""
    else:
        code, detail = answer.get("errcode", 0), answer.get("errmsg") or ""
    if not code:
        return None
    retryable = code in RATE_LIMIT_CODES.get(fmt, set())
    return _("The service refused the message: code %(code)s, %(detail)s") % {"code": code, "detail": detail}, retryable
