from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WorkspacesConfig(AppConfig):
    name = "workspaces"
    verbose_name = _("Workspaces")

    def ready(self):
        from django.apps import apps
        from django.core import checks

        from workspaces.defaults import first_workspace_fill_connect
        from workspaces.membership import first_workspace_join_connect
        from workspaces.models import Workspace
        from workspaces.sso import sign_on_check

        # While an installation has one workspace, a new account joins it as every account did
        # before workspaces existed (with its own Django permissions only).
        first_workspace_join_connect()
        checks.register(sign_on_check)
        # A model whose empty workspace means "installation-wide" says so with
        # `workspace_fill = False` (an erasure by a superuser acting installation-wide).
        first_workspace_fill_connect(
            model
            for model in apps.get_models()
            if getattr(model, "workspace_fill", True)
            and any(
                getattr(field, "related_model", None) is Workspace and field.name == "workspace"
                for field in model._meta.concrete_fields
            )
        )
