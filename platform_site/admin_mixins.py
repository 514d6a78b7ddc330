"""Admin behaviour shared by every ledger model: rows can be read, never added, changed or deleted."""

from django.contrib import admin


class ReadOnlyAdminMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    extra = 0
    show_change_link = True
    can_delete = False
