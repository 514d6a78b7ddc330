"""Workspaces and their members in the admin.

Only superusers add or delete workspaces. A workspace's owners (workspaces.change_workspace)
change its budgets, and (workspaces.manage_members) its members and their roles; they see only
the workspace they act in. A workspace always keeps an owner."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from workspaces.access import binding_of, in_workspace_of, may
from workspaces.admin_scope import WorkspaceScopedAdmin
from workspaces.membership import last_owner
from workspaces.models import Membership, Workspace, built_ins_of
from workspaces.roles import Role

MANAGE_MEMBERS = "workspaces.manage_members"


def _own_workspaces(queryset, user):
    """Every workspace for a superuser; for anyone else the one they act in."""
    if user.is_superuser:
        return queryset
    workspace_id = binding_of(user).workspace_id
    return queryset.filter(pk=workspace_id) if workspace_id is not None else queryset.none()


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    fieldsets = [
        (None, {"fields": ["name", "slug"]}),
        (
            gettext_lazy("Budgets and quotas"),
            {
                "fields": [
                    "daily_token_limit",
                    "monthly_token_limit",
                    "daily_cost_limit",
                    "monthly_cost_limit",
                    "max_runs_in_flight",
                ],
                "description": gettext_lazy("For the whole workspace: every agent, every way in. Empty: no limit."),
            },
        ),
        (
            gettext_lazy("Attachments"),
            {
                "fields": ["attachment_bytes_limit"],
                "description": gettext_lazy(
                    "The bytes the workspace's attachments may take together. Empty: the installation's default."
                ),
            },
        ),
    ]

    def get_queryset(self, request):
        return _own_workspaces(super().get_queryset(request), request.user)

    def get_readonly_fields(self, request, obj=None):
        # An owner changes the budgets; the name and slug are the installation's.
        return [] if request.user.is_superuser else ["name", "slug"]

    def _own(self, request, obj) -> bool:
        return obj is None or _own_workspaces(Workspace.objects.filter(pk=obj.pk), request.user).exists()

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and self._own(request, obj)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._own(request, obj)

    def has_add_permission(self, request):
        return request.user.is_active and request.user.is_superuser

    def has_delete_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_superuser

    def get_deleted_objects(self, objs, request):
        # What deleting would take and what would refuse it, as Workspace.delete does it: its
        # built-in rows gone first (here in a transaction rolled back), so they are neither
        # listed as protecting an empty workspace nor left behind.
        with transaction.atomic():
            for workspace in objs:
                for rows in built_ins_of(workspace):
                    rows.delete()
            found = super().get_deleted_objects(objs, request)
            transaction.set_rollback(True)
        return found

    def delete_queryset(self, request, queryset):
        for workspace in queryset:  # each through Workspace.delete, its built-in rows with it
            workspace.delete()


class MembershipForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ["workspace", "user", "role"]

    def clean_role(self):
        role = self.cleaned_data["role"]
        if role != Role.OWNER and last_owner(self.instance):
            raise ValidationError(
                _("This is the workspace's last owner: make another member an owner first."), code="last_owner"
            )
        return role


@admin.register(Membership)
class MembershipAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    """A workspace's members, for those who may view them (every role but approver); adding,
    changing a role and removing need workspaces.manage_members (owners). The mixin keeps the
    list to the workspace the person acts in and adds a member to it."""

    form = MembershipForm
    list_display = ["user", "workspace", "role", "from_sso", "created_at"]
    list_filter = ["role", "from_sso"]
    list_select_related = ["user", "workspace"]
    search_fields = ["user__username", "user__email"]
    # No bulk delete: each removal is checked for the last owner (delete_view).
    actions = None

    def get_readonly_fields(self, request, obj=None):
        # A member's role changes; who does not (remove and add instead).
        readonly = list(super().get_readonly_fields(request, obj))
        return [*readonly, "user", "from_sso"] if obj is not None else [*readonly, "from_sso"]

    def _manages(self, request, obj) -> bool:
        user = request.user
        return may(user, MANAGE_MEMBERS) and (obj is None or in_workspace_of(user, obj))

    def has_module_permission(self, request):
        return self.has_view_permission(request)

    def has_view_permission(self, request, obj=None):
        user = request.user
        viewer = may(user, "workspaces.view_membership") and (obj is None or in_workspace_of(user, obj))
        return viewer or self._manages(request, obj)

    def has_add_permission(self, request):
        return self._manages(request, None)

    def has_change_permission(self, request, obj=None):
        return self._manages(request, obj)

    def has_delete_permission(self, request, obj=None):
        return self._manages(request, obj)

    def delete_view(self, request, object_id, extra_context=None):
        membership = self.get_object(request, object_id)
        if membership is not None and self._manages(request, membership) and last_owner(membership):
            messages.error(request, _("This is the workspace's last owner: make another member an owner first."))
            return redirect(reverse("admin:workspaces_membership_change", args=[membership.pk]))
        return super().delete_view(request, object_id, extra_context)
