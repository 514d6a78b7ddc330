"""Admin behaviour shared by many models: ledger rows can be read, never added, changed or
deleted; typed JSON is parsed with the same limits as the API's."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import models
from django.forms.fields import InvalidJSONInput, JSONString

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
