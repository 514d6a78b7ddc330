"""{% operator_links as links %}: the operator pages the signed-in user can open."""

from django import template

from console import navigation

register = template.Library()


@register.simple_tag(takes_context=True)
def operator_links(context) -> list[navigation.OperatorLink]:
    request = context.get("request")
    user = getattr(request, "user", None) or context.get("user")
    if user is None:
        return []
    return navigation.operator_links(user)
