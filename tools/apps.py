from django.apps import AppConfig


class ToolsConfig(AppConfig):
    name = "tools"

    def ready(self):
        from tools.registry import registry

        registry.load_modules()
