from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WidgetsConfig(AppConfig):
    name = "widgets"
    verbose_name = _("Chat widgets")
