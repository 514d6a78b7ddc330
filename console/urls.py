from django.urls import path
from django.views.i18n import JavaScriptCatalog

from console import views, workspace_usage

urlpatterns = [
    path("", views.home, name="home"),
    path("language/", views.language_set, name="set_language"),
    path("workspace/usage/", workspace_usage.workspace_usage, name="workspace_usage"),
    # The operator pages' scripts read their strings from here, in the page's language.
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
]
