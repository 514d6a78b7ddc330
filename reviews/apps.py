from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ReviewsConfig(AppConfig):
    name = "reviews"
    verbose_name = _("Review queues")

    def ready(self):
        from reviews import tasks  # noqa: F401  (beat sends the fill task by name: every process registers it)
