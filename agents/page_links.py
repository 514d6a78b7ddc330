"""The link from any list that shows an agent to the agent's page (console.monitoring's
"monitoring:agent", reached by name: this app does not import the console). One helper for every
admin list and operator page, so each names the agent the same way and opens the same page."""

from functools import reduce

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy


def agent_page_link(agent) -> str:
    """The agent's name, linked to its page; "–" for none."""
    if agent is None:
        return "–"
    return format_html(
        '<a href="{}" class="agent-hub-link">{}</a>', reverse("monitoring:agent", args=[agent.slug]), agent.name
    )


def agent_column(path: str = "agent"):
    """A list_display column showing the agent at `path` (e.g. "run__agent") as agent_page_link;
    the list's list_select_related should follow the path, so that a page stays one query."""
    names = path.split("__")

    @admin.display(description=gettext_lazy("agent"), ordering=f"{path}__name")
    def column(self, obj):
        return agent_page_link(reduce(lambda value, name: getattr(value, name, None), names, obj))

    return column
