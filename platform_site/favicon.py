"""/favicon.ico, which every browser asks for on every page whatever the page links: the
console's icon, from the static files, instead of a 404 in each page's log."""

from functools import cache

from django.contrib.staticfiles import finders
from django.contrib.staticfiles.storage import staticfiles_storage
from django.http import HttpResponse
from django.views.decorators.cache import cache_control

from platform_site.http_methods import require_GET

ICON = "console/favicon.ico"


@cache
def _icon() -> bytes:
    # Collected static files in production, the app's own folder before collectstatic.
    path = finders.find(ICON) if not staticfiles_storage.exists(ICON) else staticfiles_storage.path(ICON)
    with open(path, "rb") as file:
        return file.read()


@require_GET
@cache_control(public=True, max_age=86400)
def favicon(request):
    return HttpResponse(_icon(), content_type="image/x-icon")
