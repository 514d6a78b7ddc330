import os

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")

app = Celery("agentry")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.autodiscover_tasks(["conversations.monitoring"])


@setup_logging.connect
def _use_django_logging(**kwargs):
    """Workers log through settings.LOGGING like the web does (same format, same bound ids)
    instead of Celery replacing the root handler with its own format."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
