from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = _("Notifications")

    def ready(self):
        from alerts.services import alert_channel_register
        from conversations.batch import run_event_listener_register
        from conversations.retention import event_records_register
        from memory.forget import run_copies_register
        from notifications import tasks  # noqa: F401  (deliveries are sent by name: every process registers it)
        from notifications.alerts import alert_notify
        from notifications.deliveries import LISTENER
        from notifications.retention import COPIES, RECORDS

        # A run's events are heard in their own transaction (conversations.batch.RunEventListener).
        run_event_listener_register(LISTENER)
        # An alert's firing and resolution are told to the rule's webhooks and addresses.
        alert_channel_register(alert_notify)
        # A purge, the daily sweep and forgetting an end user reach the deliveries.
        event_records_register(RECORDS)
        run_copies_register(COPIES)
