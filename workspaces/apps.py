from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = _("Workspaces")

    def ready(self):
        from django.core import checks

        from workspaces.membership import first_workspace_join_connect
        from workspaces.sso import sign_on_check

        # While an installation has one workspace, a new account joins it as every account did
        # before workspaces existed (with its own Django permissions only).
        first_workspace_join_connect()
        checks.register(sign_on_check)
