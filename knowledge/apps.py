from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = _("Knowledge bases")
    # Its search tools run through knowledge.executor, named in settings.AGENTRY_TOOL_EXECUTORS
    # (tools sits below this app and cannot import it).
