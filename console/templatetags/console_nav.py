"""{% operator_links as links %}: the operator pages the signed-in user can open.
{% task_index app_list as groups %}: the admin index's groups (console.admin_index)."""

from django import template

from console import admin_index, navigation

register = template.Library()


@register.simple_tag(takes_context=True)
def operator_links(context) -> list[navigation.OperatorLink]:
    request = context.get("request")
    user = getattr(request, "user", None) or context.get("user")
    if user is None:
        return []
    # The header and the index both list them: one count of pending approvals per page.
    cached = getattr(request, "_operator_links", None)
    if cached is None:
        cached = navigation.operator_links(user)
        if request is not None:
            request._operator_links = cached
    return cached


@register.simple_tag(takes_context=True)
def task_index(context, app_list) -> list[admin_index.IndexGroup]:
    return admin_index.index_groups(app_list, operator_links(context))


@register.filter
def model_label(model) -> str:
    """The model's "app_label.ModelName", as console.admin_index names models."""
    return model._meta.label
