"""The runs changelist's date hierarchy, its periods read from the list's bounds
(console.run_changelist)."""

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode

from console.run_changelist import bounded_date_hierarchy

register = template.Library()


@register.tag(name="run_date_hierarchy")
def run_date_hierarchy_tag(parser, token):
    return InclusionAdminNode(
        parser, token, func=bounded_date_hierarchy, template_name="date_hierarchy.html", takes_context=False
    )
