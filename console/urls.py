from django.urls import path
from django.views.i18n import JavaScriptCatalog

from console import views

urlpatterns = [
    path("", views.home, name="home"),
    path("language/", views.language_set, name="set_language"),
    # The operator pages' scripts read their strings from here, in the page's language.
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
]
