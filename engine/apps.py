from django.apps import AppConfig


class EngineConfig(AppConfig):
    name = "engine"

    def ready(self):
        # Register the tasks in every process (web ones too): runs are handed to workers by
        # task name from below the loop (engine.dispatch), which cannot import this module.
        from engine import tasks  # noqa: F401
