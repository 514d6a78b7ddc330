from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = _("Knowledge bases")

    def ready(self):
        # tools sits below this app, so it cannot name the executor; the kind is filled in here.
        from knowledge import executor
        from tools.executors import register_executor

        register_executor("knowledge", executor)
