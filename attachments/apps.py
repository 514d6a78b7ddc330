from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


def _operators_see_attachments(sender, **kwargs):
    # Imported when the signal fires: permissions imports models, which cannot be imported while
    # the app registry is still loading this module.
    from attachments.permissions import operators_see_attachments

    operators_see_attachments()


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
        # After every migrate (and every test-database flush) Operators may download attachments.
        post_migrate.connect(_operators_see_attachments, sender=self)
