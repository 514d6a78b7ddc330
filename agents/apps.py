from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = _("Agents")

    def ready(self):
        # A tool's admin page shows how each live version applies its approval: versions are
        # ours, the page the tools app's, below us.
        from agents.selectors import tool_live_approvals
        from tools.approval_policy import live_approvals_register

        live_approvals_register(tool_live_approvals)
