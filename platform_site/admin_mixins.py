"""Admin behaviour shared by many models: ledger rows can be read, never added, changed or
deleted; typed JSON is parsed with the same limits as the API's; an owned object's signing
secret is shown once and then only replaced."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.forms.fields import InvalidJSONInput, JSONString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from platform_site.crypto import mask
from platform_site.json_input import JSONInputError, json_loads_checked


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


class CheckedJSONFormField(forms.JSONField):
    """Django's JSON form field, parsing with platform_site.json_input: deep nesting and lone
    surrogates are a form error, not a RecursionError (also when the form is shown again) or a
    database error on save."""

    def to_python(self, value):
        if self.disabled or not isinstance(value, str) or isinstance(value, JSONString) or value in self.empty_values:
            return super().to_python(value)
        try:
            converted = json_loads_checked(value)
        except JSONInputError as exc:
            raise ValidationError(str(exc), code="invalid") from None
        return JSONString(converted) if isinstance(converted, str) else converted

    def bound_data(self, data, initial):
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            return json_loads_checked(data)
        except JSONInputError:
            return InvalidJSONInput(data)


class JSONInputAdminMixin:
    """For admins whose models have JSON fields an operator types."""

    formfield_overrides = {models.JSONField: {"form_class": CheckedJSONFormField}}


class OwnedSecretAdminMixin:
    """For an object another system signs its requests to with a secret (an inbound hook, a
    chat widget), whose runs belong to an owner. On the first save the owner is the creator
    unless a superuser chose another, and the secret is generated and shown once; afterwards it
    can only be replaced (the rotate action, which takes the change permission), never read.
    A subclass gives the service calls that make and replace the secret: `secret_new()` and
    `secret_rotate(obj)`, each returning the new secret."""

    actions = ["rotate_secret"]

    @admin.display(description=gettext_lazy("secret"))
    def secret_status(self, obj):
        return mask(obj.secret) if obj.pk else "-"

    def save_model(self, request, obj, form, change):
        if not change:
            if not request.user.is_superuser or obj.owner_id is None:
                obj.owner = request.user
            obj.secret = self.secret_new()
            self.message_user(
                request,
                _("The secret of %(name)s, copy it now; it will not be shown again: %(secret)s")
                % {"name": obj.name, "secret": obj.secret},
                messages.WARNING,
            )
        super().save_model(request, obj, form, change)

    @admin.action(
        description=gettext_lazy("Rotate the secret of the selected %(verbose_name_plural)s"), permissions=["change"]
    )
    def rotate_secret(self, request, queryset):
        for obj in queryset:
            secret = self.secret_rotate(obj)
            self.message_user(
                request,
                _("New secret of %(name)s, copy it now; it will not be shown again: %(secret)s")
                % {"name": obj.name, "secret": secret},
                messages.WARNING,
            )
