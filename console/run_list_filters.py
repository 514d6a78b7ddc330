"""The runs changelist's filters by source, version, tag, metadata, cost and duration. What each
parameter means lives in conversations.run_filters (the REST runs list takes the same ones);
these classes give them the admin's shape. A bad value is the admin's invalid-lookup answer
(IncorrectLookupParameters: the list again with ?e=1), never an error page.

Tags, metadata and ranges have too many values to list as links: they are typed into a small
form (admin/input_filter.html) that keeps the list's other parameters."""

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.models import AgentVersion
from conversations.models import RunTrigger
from conversations.run_filters import (
    COST_LIMIT,
    DURATION_LIMIT,
    REPLAY,
    RunFilterInvalid,
    meta_parse,
    range_parse,
    runs_costing,
    runs_from_source,
    runs_labelled,
    runs_lasting,
    source_parse,
    tag_parse,
)
from workspaces.access import in_workspace

AGENT_PARAMETER = "agent__id__exact"
# An agent with a long history lists its newest versions; an older one is reached by its id in
# the URL (the agent's page links to it) and is then shown as chosen.
VERSIONS_LISTED = 30
# Query parameters a filter form does not carry over: the page number and the error flag.
NOT_CARRIED = {"p", "e"}


class SourceFilter(admin.SimpleListFilter):
    """What started the run is the trigger filter; this one tells a fork that changed something
    from a replay (a fork that changed nothing). It takes every source the REST list takes."""

    title = gettext_lazy("fork or replay")
    parameter_name = "source"

    def lookups(self, request, model_admin):
        choices = [(RunTrigger.FORK.value, _("forks that changed something")), (REPLAY, _("replays (no change)"))]
        chosen = self.value()
        if chosen and chosen not in {RunTrigger.FORK, REPLAY}:
            choices.append((chosen, chosen))
        return choices

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        try:
            return runs_from_source(queryset, source_parse(self.value()))
        except RunFilterInvalid as exc:
            raise IncorrectLookupParameters(exc.message) from None


def _whole_number(value: str | None) -> int | None:
    if value and value.isascii() and value.isdigit() and int(value) < 2**31:
        return int(value)
    return None


class VersionFilter(admin.SimpleListFilter):
    """The versions of the agent chosen in the agent filter, as "vN"; with no agent chosen only
    the chosen version (if any) is listed, not every version of every agent."""

    title = gettext_lazy("version")
    parameter_name = "agent_version__id__exact"

    def lookups(self, request, model_admin):
        versions = in_workspace(AgentVersion.objects.all(), request.user)
        agent_id = _whole_number(request.GET.get(AGENT_PARAMETER))
        listed = []
        if agent_id is not None:
            listed = list(
                versions.filter(agent_id=agent_id).order_by("-number").values_list("pk", "number")[:VERSIONS_LISTED]
            )
        choices = [(pk, f"v{number}") for pk, number in listed]
        chosen = self.value()
        if chosen and _whole_number(chosen) is not None and _whole_number(chosen) not in {pk for pk, _n in listed}:
            # One more read, only when the version was chosen without (or outside) its agent's list.
            found = versions.filter(pk=int(chosen)).values_list("agent__name", "number").first()
            if found is not None:
                choices.append((int(chosen), f"{found[0]} v{found[1]}"))
        return choices

    def has_output(self):
        # A filter without output is not applied at all: a chosen version that is not listed
        # (unknown, or another workspace's) must still reach queryset() to be refused.
        return bool(self.lookup_choices) or bool(self.value())

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        if self.value() not in {str(pk) for pk, _label in self.lookup_choices}:
            raise IncorrectLookupParameters(f"unknown version {self.value()[:20]!r}")
        return queryset.filter(agent_version_id=int(self.value()))


class InputFilter(admin.ListFilter):
    """A filter whose values are typed: `inputs` are (parameter, label, kind) with kind "text"
    or "number". Each subclass defines `narrow(queryset)`, which filters by the parameters' values
    and raises RunFilterInvalid on a bad one."""

    template = "admin/input_filter.html"
    inputs: tuple[tuple[str, str, str], ...] = ()

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        for name in self.expected_parameters():
            if name in params:
                self.used_parameters[name] = params.pop(name)[-1]

    def expected_parameters(self):
        return [name for name, _label, _kind in self.inputs]

    def has_output(self):
        return True

    def choices(self, changelist):
        yield {
            "selected": not any(self.used_parameters.values()),
            "query_string": changelist.get_query_string(remove=self.expected_parameters()),
            "display": _("All"),
        }

    def fields(self) -> list[dict]:
        return [
            {
                "name": name,
                "id": f"filter-{name.replace('_', '-')}",
                "label": label,
                "kind": kind,
                "value": self.used_parameters.get(name, ""),
            }
            for name, label, kind in self.inputs
        ]

    def carried(self) -> list[tuple[str, str]]:
        """The list's other parameters, sent again with this form's."""
        own = set(self.expected_parameters()) | NOT_CARRIED
        return [(name, value) for name, values in self.request.GET.lists() if name not in own for value in values]

    def queryset(self, request, queryset):
        try:
            return self.narrow(queryset)
        except RunFilterInvalid as exc:
            raise IncorrectLookupParameters(exc.message) from None


class TagFilter(InputFilter):
    title = gettext_lazy("tag")
    inputs = (("tag", gettext_lazy("Tag"), "text"),)

    def narrow(self, queryset):
        tag = self.used_parameters.get("tag")
        return runs_labelled(queryset, key="", value=tag_parse(tag)) if tag else queryset


class MetaFilter(InputFilter):
    title = gettext_lazy("metadata")
    inputs = (("meta", gettext_lazy("Key:value"), "text"),)

    def narrow(self, queryset):
        meta = self.used_parameters.get("meta")
        if not meta:
            return queryset
        key, value = meta_parse(meta)
        return runs_labelled(queryset, key=key, value=value)


class CostFilter(InputFilter):
    title = gettext_lazy("cost")
    inputs = (("cost_min", gettext_lazy("At least"), "number"), ("cost_max", gettext_lazy("At most"), "number"))

    def narrow(self, queryset):
        get = self.used_parameters.get
        return runs_costing(queryset, range_parse("cost", get("cost_min"), get("cost_max"), limit=COST_LIMIT))


class DurationFilter(InputFilter):
    title = gettext_lazy("duration (seconds)")
    inputs = (
        ("duration_min", gettext_lazy("At least"), "number"),
        ("duration_max", gettext_lazy("At most"), "number"),
    )

    def narrow(self, queryset):
        get = self.used_parameters.get
        bounds = range_parse("duration", get("duration_min"), get("duration_max"), limit=DURATION_LIMIT)
        return runs_lasting(queryset, bounds)
