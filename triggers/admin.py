"""The admin of schedules and hooks: each in a module of its own."""

from triggers import hook_admin, schedule_admin  # noqa: F401  (each registers its models)
