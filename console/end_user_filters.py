"""The admin's end user filters and column, for the conversation and run lists.

An application may serve a great many end users, so no filter lists them all: the end user column
links to the list of that end user's rows (?end_user=<id>), and the filter then shows the chosen
one, to clear it. Whether a row has an end user at all is a filter of its own."""

from urllib.parse import urlencode

from django.contrib import admin
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

PARAMETER = "end_user"


class EndUserFilter(admin.SimpleListFilter):
    title = gettext_lazy("end user")
    parameter_name = PARAMETER
    field = "end_user"

    def lookups(self, request, model_admin):
        chosen = self.value()
        return [(chosen, chosen)] if chosen else []

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(**{self.field: self.value()})
        return queryset


class RunEndUserFilter(EndUserFilter):
    field = "conversation__end_user"


class HasEndUserFilter(admin.SimpleListFilter):
    title = gettext_lazy("has end user")
    parameter_name = "has_end_user"

    def lookups(self, request, model_admin):
        return [("yes", _("yes")), ("no", _("no"))]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.exclude(end_user="")
        if self.value() == "no":
            return queryset.filter(end_user="")
        return queryset


def end_user_link(end_user: str):
    """The end user, linking to the same list narrowed to them; empty for a row without one."""
    if not end_user:
        return ""
    return format_html(
        '<a href="?{}" title="{}">{}</a>', urlencode({PARAMETER: end_user}), _("this end user's rows"), end_user
    )
