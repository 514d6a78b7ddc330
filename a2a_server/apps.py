from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class A2AServerConfig(AppConfig):
    name = "a2a_server"
    verbose_name = _("A2A server")

    def ready(self):
        from a2a_server import tasks  # noqa: F401  (push notifications are sent by name: every process registers it)
        from a2a_server.push import LISTENER
        from conversations.batch import run_event_listener_register

        # A task's push notifications are heard from its run's events, in their own transaction.
        run_event_listener_register(LISTENER)
