"""WeCom (chatbots.services.wecom, wecom_crypto): the callback's published worked example
(WeCom's WXBizMsgCrypt sample: its token, EncodingAESKey, corp id, signatures and ciphertexts),
and requests recorded as WeCom sends them, encrypted and signed here with its scheme."""

import base64
import struct
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from chatbots.services import wecom_crypto
from chatbots.services.base import Answer, ButtonPress, ChatMessage, Inbound, Refused
from chatbots.services.wecom import WeCom

# WeCom's sample parameters and its two recorded requests.
SAMPLE_TOKEN = "QDG6eK"
SAMPLE_KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
SAMPLE_CORP = "wx5823bf96d3bd56c7"
SAMPLE_ECHO = "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
SAMPLE_POST = (
    "pvXgeha3nZ7UQ2DG3WD3IVsNJR38QVl1+h+wmLQHIAwEG3Jey2aTZtvAWzhEZ9JEKGwIUMBWX3JlUhfo7O7WbvI10vHIsdSNr1nr3LuOwAfnw"
    "LJAMQNDxi5tHUl08Op59jxOL73r8+g60KOxMTaFwXzlr9Yxgq5ey5nzNb/2vDjjvDZNXkJVmL/XWnv6PXrVbTpNxphqWRv2BpPYqvwRMkHgdFl"
    "iatljMVlkkRHS40FOHmtBhj/4RXtIexfDx8opBXwi0L9RTlYNQzGx+FA+74xVHG7Le/pmNDwc2Ri5mbw="
)

NOW = 1_765_000_000
SECRETS = {
    "corp_id": "ww1436e0e65a779aee",
    "corp_secret": "corp-secret",
    "agent_id": "1000002",
    "token": "hJqcu3uJ9Tn2gXPm",
    "encoding_aes_key": "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt",
    "access_token": "accesstoken000001",
}
HASH = "c" * 64
API = "http://127.0.0.1:9"


def query(encrypted: str, *, timestamp=NOW, token=SECRETS["token"], **extra) -> dict:
    signature = wecom_crypto.signature(token, str(timestamp), "1372623149", encrypted)
    return {"msg_signature": signature, "timestamp": str(timestamp), "nonce": "1372623149", **extra}


def post(inner: str, *, secrets=SECRETS, timestamp=NOW, token=SECRETS["token"], encrypted=None) -> Inbound:
    encrypted = encrypted or wecom_crypto.encrypt(
        inner.encode(), encoding_aes_key=secrets["encoding_aes_key"], receive_id=secrets["corp_id"]
    )
    body = (
        f"<xml><ToUserName><![CDATA[{SECRETS['corp_id']}]]></ToUserName>"
        f"<AgentID><![CDATA[1000002]]></AgentID><Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"
    )
    return Inbound(
        method="POST",
        path="/chat/wecom/1/",
        query=query(encrypted, timestamp=timestamp, token=token),
        headers={"content-type": "text/xml"},
        body=body.encode(),
    )


def text_message(content="你好", chat_id="") -> str:
    chat = f"<ChatId><![CDATA[{chat_id}]]></ChatId>" if chat_id else ""
    return (
        f"<xml><ToUserName><![CDATA[{SECRETS['corp_id']}]]></ToUserName>"
        "<FromUserName><![CDATA[zhangsan]]></FromUserName><CreateTime>1348831860</CreateTime>"
        f"<MsgType><![CDATA[text]]></MsgType><Content><![CDATA[{content}]]></Content>"
        f"<MsgId>1234567890123456</MsgId><AgentID>1000002</AgentID>{chat}</xml>"
    )


def card_event(key: str) -> str:
    return (
        f"<xml><ToUserName><![CDATA[{SECRETS['corp_id']}]]></ToUserName>"
        "<FromUserName><![CDATA[lisi]]></FromUserName><CreateTime>1348831999</CreateTime>"
        "<MsgType><![CDATA[event]]></MsgType><Event><![CDATA[template_card_event]]></Event>"
        f"<EventKey><![CDATA[{key}]]></EventKey><TaskId><![CDATA[agentry-42-0a1b]]></TaskId>"
        "<CardType><![CDATA[button_interaction]]></CardType><ResponseCode><![CDATA[resp-code-1]]></ResponseCode>"
        "<AgentID>1000002</AgentID></xml>"
    )


@pytest.fixture
def wecom():
    return WeCom(clock=lambda: NOW)


def test_the_published_url_verification_example():
    assert (
        wecom_crypto.signature(SAMPLE_TOKEN, "1409659589", "263014780", SAMPLE_ECHO)
        == "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3"
    )
    assert wecom_crypto.decrypt(SAMPLE_ECHO, encoding_aes_key=SAMPLE_KEY, receive_id=SAMPLE_CORP) == (
        b"1616140317555161061"
    )


def test_the_published_message_example():
    assert (
        wecom_crypto.signature(SAMPLE_TOKEN, "1409659813", "1372623149", SAMPLE_POST)
        == "1f3153b7abd0ba99b4ab2e57fac2376110d03a3c"
    )
    plain = wecom_crypto.decrypt(SAMPLE_POST, encoding_aes_key=SAMPLE_KEY, receive_id=SAMPLE_CORP)
    assert b'"Content": "hello"' in plain and b"4561255354251345929" in plain
    with pytest.raises(wecom_crypto.CryptoError):
        wecom_crypto.decrypt(SAMPLE_POST, encoding_aes_key=SAMPLE_KEY, receive_id="another corp")


def test_the_published_example_through_the_service():
    service = WeCom(clock=lambda: 1409659589)
    secrets = {**SECRETS, "token": SAMPLE_TOKEN, "encoding_aes_key": SAMPLE_KEY, "corp_id": SAMPLE_CORP}
    inbound = Inbound(
        method="GET",
        path="/chat/wecom/1/",
        query={
            "msg_signature": "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3",
            "timestamp": "1409659589",
            "nonce": "263014780",
            "echostr": SAMPLE_ECHO,
        },
        headers={},
        body=b"",
    )
    service.verify(inbound, secrets)
    assert service.handshake(inbound, secrets) == Answer(
        body=b"1616140317555161061", content_type="text/plain; charset=utf-8"
    )
    assert service.parse(inbound, secrets) is None


def test_the_padding_is_to_32_byte_blocks():
    encrypted = wecom_crypto.encrypt(
        b"x", encoding_aes_key=SECRETS["encoding_aes_key"], receive_id="corp", random=b"r" * 16
    )
    key = base64.b64decode(SECRETS["encoding_aes_key"] + "=")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    plain = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
    # 16 random + 4 length + 1 message + 4 corp id = 25 bytes, padded with 7 to 32.
    assert plain == b"r" * 16 + struct.pack(">I", 1) + b"x" + b"corp" + bytes([7]) * 7


def test_a_signed_encrypted_message_verifies_and_parses(wecom):
    inbound = post(text_message())
    wecom.verify(inbound, SECRETS)
    assert wecom.handshake(inbound, SECRETS) is None
    event = wecom.parse(inbound, SECRETS)
    assert event == ChatMessage(
        event_id="1234567890123456",
        user_id="zhangsan",
        thread_id="zhangsan",
        text="你好",
        reply_to={"chat_id": "", "agent_id": "1000002"},
    )
    assert wecom.ack(event) == Answer(body=b"success", content_type="text/plain; charset=utf-8")


def test_a_group_message_is_the_groups_conversation(wecom):
    event = wecom.parse(post(text_message(chat_id="wrkSFfCgAAxxxx")), SECRETS)
    assert event.thread_id == "wrkSFfCgAAxxxx"
    sent = wecom.reply_request(event, "答案", SECRETS, API)
    assert sent["url"] == f"{API}/cgi-bin/appchat/send?access_token=accesstoken000001"
    assert sent["json"] == {"chatid": "wrkSFfCgAAxxxx", "msgtype": "text", "text": {"content": "答案"}, "safe": 0}


@pytest.mark.parametrize(
    "inbound",
    [
        pytest.param(post(text_message(), token="another token"), id="wrong signature"),
        pytest.param(post(text_message(), timestamp=NOW - 3601), id="stale timestamp"),
        pytest.param(post(text_message(), timestamp=NOW + 3601), id="future timestamp"),
    ],
)
def test_a_bad_signature_or_stale_timestamp_is_refused(wecom, inbound):
    with pytest.raises(Refused) as refused:
        wecom.verify(inbound, SECRETS)
    assert refused.value.answer.status == 401


def test_an_unsigned_request_is_refused(wecom):
    inbound = post(text_message())
    with pytest.raises(Refused) as refused:
        wecom.verify(Inbound(inbound.method, inbound.path, {}, inbound.headers, inbound.body), SECRETS)
    assert refused.value.answer.status == 401


def test_a_tampered_ciphertext_is_refused(wecom):
    encrypted = wecom_crypto.encrypt(
        text_message().encode(), encoding_aes_key=SECRETS["encoding_aes_key"], receive_id=SECRETS["corp_id"]
    )
    raw = bytearray(base64.b64decode(encrypted))
    raw[-20] ^= 1
    tampered = base64.b64encode(bytes(raw)).decode()
    # Signed as the attacker can (the signature needs the token, so with it): the decryption refuses.
    with pytest.raises(Refused) as refused:
        wecom.verify(post("", encrypted=tampered), SECRETS)
    assert refused.value.answer.status == 400


def test_a_message_encrypted_for_another_corp_is_refused(wecom):
    with pytest.raises(Refused) as refused:
        wecom.verify(post(text_message(), secrets={**SECRETS, "corp_id": "another corp"}), SECRETS)
    assert refused.value.answer.status == 400


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not xml",
        b"<xml><Encrypt>",
        b'<!DOCTYPE x [<!ENTITY a "aaaa">]><xml><Encrypt>&a;</Encrypt></xml>',
    ],
)
def test_a_body_that_is_not_wecom_xml_is_refused(wecom, body):
    inbound = Inbound("POST", "/chat/wecom/1/", query(""), {}, body)
    with pytest.raises(Refused) as refused:
        wecom.verify(inbound, SECRETS)
    assert refused.value.answer.status in (400, 401)


def test_a_decrypted_document_type_is_refused(wecom):
    with pytest.raises(Refused) as refused:
        wecom.parse(post('<!DOCTYPE x [<!ENTITY a "b">]><xml><MsgType>&a;</MsgType></xml>'), SECRETS)
    assert refused.value.answer.status == 400


def test_the_url_verification_echoes_the_plaintext(wecom):
    echo = wecom_crypto.encrypt(
        b"8371923432", encoding_aes_key=SECRETS["encoding_aes_key"], receive_id="ww1436e0e65a779aee"
    )
    inbound = Inbound("GET", "/chat/wecom/1/", query(echo, echostr=echo), {}, b"")
    wecom.verify(inbound, SECRETS)
    assert wecom.handshake(inbound, SECRETS).body == b"8371923432"
    # The app asks for the handshake first: an echostr not signed with the token is not echoed.
    forged = Inbound("GET", "/chat/wecom/1/", query(echo, token="wrong", echostr=echo), {}, b"")
    for ask in (wecom.handshake, wecom.verify):
        with pytest.raises(Refused) as refused:
            ask(forged, SECRETS)
        assert refused.value.answer.status == 401
    stale = Inbound("GET", "/chat/wecom/1/", query(echo, timestamp=NOW - 7200, echostr=echo), {}, b"")
    with pytest.raises(Refused):
        wecom.handshake(stale, SECRETS)


def test_other_events_and_message_kinds_are_ignored(wecom):
    enter = text_message().replace("<MsgType><![CDATA[text]]>", "<MsgType><![CDATA[event]]><Event>enter_agent</Event>")
    assert wecom.parse(post(enter), SECRETS) is None
    location = text_message().replace("[CDATA[text]]", "[CDATA[location]]")
    assert wecom.parse(post(location), SECRETS) is None


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_card_button_press_parses_to_the_decision(wecom, decision):
    inbound = post(card_event(f"{decision}:42:{HASH}"))
    wecom.verify(inbound, SECRETS)
    press = wecom.parse(inbound, SECRETS)
    assert press == ButtonPress(
        event_id="lisi:1348831999:agentry-42-0a1b",
        user_id="lisi",
        approval_id="42",
        decision=decision,
        request_hash=HASH,
        reply_to={"task_id": "agentry-42-0a1b", "response_code": "resp-code-1"},
    )
    assert wecom.ack(press).body == b"success"


@pytest.mark.parametrize("key", ["", "approve", "approve:42", f"maybe:42:{HASH}", f":42:{HASH}"])
def test_a_press_of_another_key_is_ignored(wecom, key):
    assert wecom.parse(post(card_event(key)), SECRETS) is None


def test_an_empty_api_base_is_the_public_host(wecom):
    assert wecom.token_request(SECRETS, "")["url"].startswith("https://qyapi.weixin.qq.com/cgi-bin/gettoken?")


def test_the_token_request_and_its_answer(wecom):
    sent = wecom.token_request(SECRETS, API)
    assert sent["method"] == "GET"
    url = urlsplit(sent["url"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{API}/cgi-bin/gettoken"
    assert parse_qs(url.query) == {"corpid": ["ww1436e0e65a779aee"], "corpsecret": ["corp-secret"]}
    assert wecom.token_from_answer({"errcode": 0, "errmsg": "ok", "access_token": "tok", "expires_in": 7200}) == (
        "tok",
        7200,
    )
    with pytest.raises(ValueError):
        wecom.token_from_answer({"errcode": 40013, "errmsg": "invalid corpid"})


def test_the_reply_request(wecom):
    message = wecom.parse(post(text_message()), SECRETS)
    assert wecom.reply_request(message, "答案", SECRETS, API) == {
        "method": "POST",
        "url": f"{API}/cgi-bin/message/send?access_token=accesstoken000001",
        "headers": {"Content-Type": "application/json; charset=utf-8"},
        "json": {"touser": "zhangsan", "msgtype": "text", "agentid": 1000002, "text": {"content": "答案"}, "safe": 0},
    }


def test_the_approval_card_is_a_button_interaction_template_card(wecom):
    message = wecom.parse(post(text_message()), SECRETS)
    approval = {
        "id": 42,
        "request_hash": HASH,
        "tool": "send_email",
        "arguments": {},
        "text": "The agent asks to call send_email with {}.",
        "approve_label": "批准",
        "reject_label": "拒绝",
    }
    sent = wecom.approval_card_request(message, approval, SECRETS, API)
    assert sent["url"] == f"{API}/cgi-bin/message/send?access_token=accesstoken000001"
    body = sent["json"]
    assert (body["touser"], body["msgtype"], body["agentid"]) == ("zhangsan", "template_card", 1000002)
    card = body["template_card"]
    assert card["card_type"] == "button_interaction"
    assert card["main_title"] == {"title": "Approval needed: send_email"}
    assert card["sub_title_text"] == "The agent asks to call send_email with {}."
    assert [(button["text"], button["style"]) for button in card["button_list"]] == [("批准", 1), ("拒绝", 2)]
    assert card["task_id"].startswith("agentry-42-") and len(card["task_id"]) <= 128
    assert (
        card["task_id"]
        != wecom.approval_card_request(message, approval, SECRETS, API)["json"]["template_card"]["task_id"]
    )
    keys = [button["key"] for button in card["button_list"]]
    assert keys == [f"approve:42:{HASH}", f"reject:42:{HASH}"]
    # The key a press sends back is exactly what the card carried.
    press = wecom.parse(post(card_event(keys[0])), SECRETS)
    assert (press.approval_id, press.decision, press.request_hash) == ("42", "approve", HASH)
