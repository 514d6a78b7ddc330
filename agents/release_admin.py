"""The agent's release pages in the admin: its versions, a diff of any two, and the release
actions (publish, roll back, canary start / promote / abort). Viewing takes the permission to
view the agent; acting takes agents.publish_agent."""

from django import forms
from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from agents.models import AgentVersion
from agents.releases import (
    PUBLISH_PERMISSION,
    ReleaseRefused,
    UnknownVersion,
    release_apply,
)
from agents.selectors import agent_releases, agent_versions
from agents.snapshot import snapshot_build, snapshot_hash
from agents.version_diff import version_diff
from platform_site.http_methods import require_GET, require_POST


class ReleaseForm(forms.Form):
    action = forms.ChoiceField(
        choices=[(name, name) for name in ("publish", "rollback", "canary_start", "canary_promote", "canary_abort")]
    )
    note = forms.CharField(required=False, max_length=2000, label=gettext_lazy("Change note"))
    percent = forms.IntegerField(required=False, min_value=1, max_value=99, label=gettext_lazy("Share (%)"))
    version = forms.IntegerField(required=False, min_value=1, max_value=2**31 - 1)


class DiffForm(forms.Form):
    a = forms.IntegerField(min_value=1, max_value=2**31 - 1)
    b = forms.IntegerField(min_value=1, max_value=2**31 - 1)


class AgentReleaseAdminMixin:
    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/versions/", wrap(require_GET(self.versions_view)), name="agents_agent_versions"),
            path(
                "<path:object_id>/versions/diff/", wrap(require_GET(self.version_diff_view)), name="agents_agent_diff"
            ),
            # POST only, with the admin's CSRF check: each action changes what live traffic runs.
            path("<path:object_id>/release/", wrap(require_POST(self.release_view)), name="agents_agent_release"),
            *super().get_urls(),
        ]

    def _agent(self, request, object_id):
        agent = self.get_object(request, unquote(object_id))
        if agent is None:
            raise Http404(_("No such agent."))
        if not self.has_view_permission(request, agent):
            raise PermissionDenied
        return agent

    def _context(self, request, agent, title: str, **extra) -> dict:
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "original": agent,
            "may_publish": request.user.has_perm(PUBLISH_PERMISSION),
            **extra,
        }

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # The agent's page shows its versions as a section; acting on them stays on the versions page.
        agent = self.get_object(request, unquote(object_id))
        if agent is not None and self.has_view_permission(request, agent):
            extra_context = {
                **(extra_context or {}),
                **self.versions_context(agent),
                "may_publish": request.user.has_perm(PUBLISH_PERMISSION),
            }
        return super().change_view(request, object_id, form_url, extra_context)

    def versions_context(self, agent) -> dict:
        """The agent's versions and what is live: for its versions page and its change page."""
        versions = list(agent_versions(agent=agent))
        # Read apart from the list, which holds only the latest versions.
        live = {
            v.pk: v
            for v in AgentVersion.objects.defer("snapshot").filter(
                pk__in=[agent.published_version_id, agent.canary_version_id]
            )
        }
        published = live.get(agent.published_version_id)
        # Whether the draft differs from what is live, read without writing a version.
        draft_hash = snapshot_hash(snapshot_build(agent=agent))
        return {
            "versions": versions,
            "published": published,
            "canary": live.get(agent.canary_version_id),
            "draft_unpublished": published is None or published.config_hash != draft_hash,
            "draft_version": next((v for v in versions if v.config_hash == draft_hash), None),
        }

    def _versions_page(self, request, agent, *, form=None, error: str = "", status: int = 200):
        context = self._context(
            request,
            agent,
            _("Versions of %(agent)s") % {"agent": agent},
            **self.versions_context(agent),
            releases=agent_releases(agent=agent),
            form=form or ReleaseForm(),
            error=error,
        )
        return TemplateResponse(request, "admin/agents/agent/versions.html", context, status=status)

    def versions_view(self, request, object_id):
        return self._versions_page(request, self._agent(request, object_id))

    def version_diff_view(self, request, object_id):
        agent = self._agent(request, object_id)
        form = DiffForm(request.GET)
        if not form.is_valid():
            return self._versions_page(request, agent, error=_("Choose two version numbers to compare."), status=400)
        found = {
            v.number: v
            for v in AgentVersion.objects.filter(agent=agent, number__in=form.cleaned_data.values(), playground=False)
        }
        old, new = found.get(form.cleaned_data["a"]), found.get(form.cleaned_data["b"])
        if old is None or new is None:
            return self._versions_page(request, agent, error=_("The agent has no such version."), status=400)
        context = self._context(
            request,
            agent,
            _("%(agent)s: version %(a)s → %(b)s") % {"agent": agent, "a": old.number, "b": new.number},
            diff=version_diff(old=old, new=new),
            versions_url=reverse("admin:agents_agent_versions", args=[agent.pk]),
        )
        return TemplateResponse(request, "admin/agents/agent/version_diff.html", context)

    def release_view(self, request, object_id):
        agent = self._agent(request, object_id)
        if not request.user.has_perm(PUBLISH_PERMISSION):
            raise PermissionDenied
        form = ReleaseForm(request.POST)
        if not form.is_valid():
            return self._versions_page(request, agent, form=form, error=_("Check the form."), status=400)
        try:
            release = release_apply(agent=agent, user=request.user, **form.cleaned_data)
        except (ReleaseRefused, UnknownVersion) as exc:
            return self._versions_page(request, agent, form=form, error=str(exc), status=400)
        done = {"action": release.get_action_display(), "number": release.version.number}
        messages.success(request, _("%(action)s: version %(number)s.") % done)
        return redirect("admin:agents_agent_versions", agent.pk)
