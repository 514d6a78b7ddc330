from django.apps import AppConfig
from django.db.models.signals import post_save
from django.utils.translation import gettext_lazy as _


class ToolsConfig(AppConfig):
    name = "tools"
    verbose_name = _("Tools")

    def ready(self):
        from tools.registry import registry
        from tools.services import workspace_builtin_tools, workspace_builtin_tools_create
        from workspaces.models import Workspace, workspace_built_ins

        registry.load_modules()
        # Here, not in the workspace admin: a workspace is also made by single sign-on's
        # mapping, the demo, a script or the shell, and workspaces (a lower layer) may not
        # import tools. Every new workspace's agents can use the built-in tools at once.
        post_save.connect(workspace_builtin_tools_create, sender=Workspace, dispatch_uid="workspace_builtin_tools")
        workspace_built_ins.connect(workspace_builtin_tools, sender=Workspace, dispatch_uid="workspace_builtin_tools")
