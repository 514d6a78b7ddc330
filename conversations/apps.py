from django.apps import AppConfig
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _


def _approvers_group(sender, **kwargs):
    # Imported when the signal fires: permissions imports models, which cannot be imported
    # while the app registry is still loading this module.
    from conversations.permissions import approvers_group_ensure, operators_group_ensure

    approvers_group_ensure()
    operators_group_ensure()


class ConversationsConfig(AppConfig):
    name = "conversations"
    verbose_name = _("Conversations")

    def ready(self):
        # After every migrate (and every test-database flush) the Approvers and Operators groups exist.
        post_migrate.connect(_approvers_group, sender=self)
