from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AttachmentsConfig(AppConfig):
    name = "attachments"
    verbose_name = _("Attachments")

    def ready(self):
        from attachments.retention import COPIES, RECORDS
        from conversations.retention import event_records_register
        from memory.forget import run_copies_register

        # The daily sweep deletes attachments no message uses any more (their uses went with
        # the purged runs), and forgetting an end user deletes theirs, bytes included.
        event_records_register(RECORDS)
        run_copies_register(COPIES)
