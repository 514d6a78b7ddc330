"""Forgetting an end user (memory.forget) reaches the chat events of their runs: the chat ids
they hold (who wrote, which thread and message to answer) are blanked. The mapping of a chat
user to the end user (ChatUser) is the operator's configuration and stays."""

from chatbots.models import ChatEvent
from memory.forget import RunCopies


def chat_events_erase(*, run_ids) -> dict[str, int]:
    erased = ChatEvent.objects.filter(run_id__in=run_ids).update(chat_user_id="", thread_id="", reply_to={})
    return {"chat_events_erased": erased}


COPIES = RunCopies(runs=lambda run_ids: set(), erase=chat_events_erase)
