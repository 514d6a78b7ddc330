"""Which channel vouched for an end user, and so whose memories a conversation reads and writes.

An end user id is the word of whoever signed it: the owner's API token, a widget's secret (a
token for "u1" from one site), a hook's secret (any "u1" the payload names). Conversations keep
those apart (a widget reads only its own: widgets.services.widget_conversations), and memories
follow the same boundary: they are kept per (scope, owner, channel, end user), the channel being
the widget or hook the conversation came through, or the owner's own for the API. Otherwise a
token for "u1" on one widget would be shown, and could rewrite, what "u1" said on another site
or through the API.

An operator joins a widget or a hook to the owner's channel explicitly (its "shares end users'
memory with the owner's other channels" setting, off by default): its conversations are then
marked shared when they start, and read and write the owner's channel.

The mark is in the conversation's metadata, where the widget's id already marks its
conversations: written by the widget or hook that starts the conversation, which an end user's
token or a hook's payload cannot set (only the owner's API can edit metadata, and the owner
speaks for every channel of theirs anyway).
"""

# The owner's own channel: the API, and the widgets and hooks joined to it. What every memory
# written before channels existed means.
OWNER_CHANNEL = ""
# The metadata keys: the widget's or hook's id, and the join.
WIDGET_KEY = "widget"
HOOK_KEY = "hook"
# A chat app's bot (chatbots): its chat users' ids are the chat service's word.
CHAT_KEY = "chat_channel"
SHARED_KEY = "memory_shared"
# What a channel looks like, for a filter that names one (the owner's is empty).
CHANNEL_PATTERN = r"^((widget|hook|chat_channel):[0-9a-f-]{36})?$"


def channel_metadata(*, widget_id=None, hook_id=None, chat_channel_id=None, shared: bool) -> dict:
    """The metadata a conversation started through a widget, a hook or a chat app's bot carries."""
    if widget_id is not None:
        metadata = {WIDGET_KEY: str(widget_id)}
    elif chat_channel_id is not None:
        metadata = {CHAT_KEY: str(chat_channel_id)}
    else:
        metadata = {HOOK_KEY: str(hook_id)}
    if shared:
        metadata[SHARED_KEY] = True
    return metadata


def conversation_channel(metadata) -> str:
    """The channel whose memories a conversation with this metadata reads and writes:
    "widget:<id>", "hook:<id>", or OWNER_CHANNEL (the API, or a widget or hook joined to it)."""
    if not isinstance(metadata, dict) or metadata.get(SHARED_KEY) is True:
        return OWNER_CHANNEL
    for key in (WIDGET_KEY, HOOK_KEY, CHAT_KEY):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return f"{key}:{value}"[:80]
    return OWNER_CHANNEL
