from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _approvers_group(sender, **kwargs):
    from conversations.approvals.services import approvers_group_ensure

    approvers_group_ensure()


class ConversationsConfig(AppConfig):
    name = "conversations"

    def ready(self):
        # After every migrate (and every test-database flush) the Approvers group exists.
        post_migrate.connect(_approvers_group, sender=self)
