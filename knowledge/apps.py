from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = _("Knowledge bases")

    def ready(self):
        # A base's search tool is a tool kind of its own; tools sits below this app and runs it
        # through the executor registered here (in every process that loads the app).
        from knowledge import executor
        from tools.executors import executor_register

        executor_register(kind="knowledge", executor=executor)
