from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChatbotsConfig(AppConfig):
    name = "chatbots"
    verbose_name = _("Chat-app bots")

    def ready(self):
        from chatbots import tasks  # noqa: F401  (replies are sent by name: every process registers them)
        from chatbots.forget import COPIES
        from chatbots.replies import LISTENER, STREAM_LISTENER
        from conversations.batch import run_event_listener_register
        from memory.forget import run_copies_register

        # A chat-started run's end and its approval requests are heard in their own transaction.
        run_event_listener_register(LISTENER)
        # Its streamed text, to post the answer early and edit it as it grows.
        run_event_listener_register(STREAM_LISTENER)
        # Forgetting an end user blanks the chat ids of their runs' events.
        run_copies_register(COPIES)
