"""{% workspace_switcher %}: the header's choice of workspace, on every page that has a header."""

from django import template

from workspaces.switcher import switch_choices

register = template.Library()


@register.inclusion_tag("workspaces/_switcher.html", takes_context=True)
def workspace_switcher(context) -> dict:
    request = context.get("request")
    user = getattr(request, "user", None) or context.get("user")
    choices = switch_choices(user)
    return {
        "choices": choices,
        "current": next((choice for choice in choices if choice.current), None),
        "next": request.get_full_path() if request is not None else "",
        "csrf_token": context.get("csrf_token"),
    }
