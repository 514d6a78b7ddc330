"""One module per chat service (Slack, Telegram, Feishu/Lark, DingTalk, WeCom), each a
`chatbots.services.base.ChatService`: how the service proves a callback is its own, what an event
says, how to answer in the thread and how an approval card's button press arrives. The registry
(SERVICES) maps a channel's service name to its module's object."""

from chatbots.services.base import ChatService
from chatbots.services.dingtalk import DINGTALK
from chatbots.services.feishu import FEISHU
from chatbots.services.slack import SLACK
from chatbots.services.telegram import TELEGRAM
from chatbots.services.wecom import WECOM

SERVICES: dict[str, ChatService] = {
    SLACK.name: SLACK,
    TELEGRAM.name: TELEGRAM,
    FEISHU.name: FEISHU,
    DINGTALK.name: DINGTALK,
    WECOM.name: WECOM,
}
