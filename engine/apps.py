from django.apps import AppConfig


class EngineConfig(AppConfig):
    name = "engine"

    def ready(self):
        # Register the tasks in every process (web ones too): runs are handed to workers by
        # task name from below the loop (engine.dispatch), which cannot import this module.
        # The `remember` tool, a python tool of the registry (tools sits below the engine, whose
        # runs it writes memories for), is registered wherever the app is loaded, likewise.
        from engine import remember, tasks  # noqa: F401
