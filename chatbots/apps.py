from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChatbotsConfig(AppConfig):
    name = "chatbots"
    verbose_name = _("Chat-app bots")

    def ready(self):
        from chatbots import tasks  # noqa: F401  (replies are sent by name: every process registers them)
        from chatbots.replies import LISTENER
        from conversations.batch import run_event_listener_register

        # A chat-started run's end and its approval requests are heard in their own transaction.
        run_event_listener_register(LISTENER)
