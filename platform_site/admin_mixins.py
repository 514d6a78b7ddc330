"""Admin behaviour shared by many models: ledger rows can be read, never added, changed or
deleted; JSON read there is shown as indented JSON; typed JSON is parsed with the same limits as
the API's; an owned object's signing secret is shown once and then only replaced (and said to
be unreadable when the keys cannot decrypt it); a tabular inline's boxes are named for screen
readers."""

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import InlineModelAdmin
from django.core.exceptions import ValidationError
from django.db import models
from django.forms.fields import InvalidJSONInput, JSONString
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from platform_site.crypto import SecretDecryptionError, mask
from platform_site.json_input import JSONInputError, json_loads_checked


def json_html(value) -> str:
    """A stored JSON value as an operator reads it: indented JSON (null, true, double quotes;
    never Python's None, True, 'x'), escaped, in a <pre> that scrolls when long."""
    text = json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False, default=str)
    return format_html('<pre class="json">{}</pre>', text)


JSON_SHOWN_SUFFIX = "_as_json"


def _json_display(field):
    def display(obj):
        return json_html(getattr(obj, field.attname))

    display.short_description = field.verbose_name
    return display


class JSONDisplayMixin:
    """Every JSONField of a model admin's model, where it is read-only (a ledger row, a field in
    readonly_fields, an account that may only view), shown by json_html. Django shows a
    read-only model field as one line of JSON, and an empty or false value as Python would print
    it; an admin attribute is shown as it returns. So each read-only JSON field `x` is listed as
    the attribute `x_as_json` (same label) in the fieldsets and the read-only fields. Inlines keep
    Django's one line, which suits a table row."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._json_fields = set()
        if isinstance(self, InlineModelAdmin):
            return
        for field in self.model._meta.get_fields():
            if isinstance(field, models.JSONField):
                self._json_fields.add(field.name)
                setattr(self, field.name + JSON_SHOWN_SUFFIX, _json_display(field))

    def _shown(self, name):
        return name + JSON_SHOWN_SUFFIX if isinstance(name, str) and name in self._json_fields else name

    def get_readonly_fields(self, request, obj=None):
        return [self._shown(name) for name in super().get_readonly_fields(request, obj)]

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if not self._json_fields:
            return fieldsets
        every = obj is not None and not self.has_change_permission(request, obj)
        readonly = set(self.get_readonly_fields(request, obj))
        seen = set()

        def shown(name):
            swapped = self._shown(name)
            return swapped if every or swapped in readonly else name

        def line(names):
            if isinstance(names, (list, tuple)):
                kept = [shown(n) for n in names if shown(n) not in seen]
                seen.update(kept)
                return type(names)(kept)
            name = shown(names)
            if name in seen:
                return None
            seen.add(name)
            return name

        result = []
        for title, options in fieldsets:
            fields = [f for f in (line(names) for names in options.get("fields", ())) if f]
            result.append((title, {**options, "fields": fields}))
        return result


class ReadOnlyAdminMixin(JSONDisplayMixin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class _LabelledFieldsFormSet:
    def add_fields(self, form, index):
        super().add_fields(form, index)
        for field in form.fields.values():
            # A relation's box is wrapped (RelatedFieldWidgetWrapper) and the inner widget is the
            # one rendered; the wrapper's own attrs are the first form's, shared by the copies.
            widget = getattr(field.widget, "widget", field.widget)
            if field.label:
                widget.attrs.setdefault("aria-label", field.label)


class LabelledTabularInline(admin.TabularInline):
    """A tabular inline whose fields have names for screen readers: a row's boxes sit under the
    table's column headings with no <label> of their own, so each is named by its field's label
    (the delete box too). Django's own tabular template has no such label."""

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        return type(formset.__name__, (_LabelledFieldsFormSet, formset), {})


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


class JSONInputAdminMixin(JSONDisplayMixin):
    """For admins whose models have JSON fields an operator types (and others may only view)."""

    formfield_overrides = {models.JSONField: {"form_class": CheckedJSONFormField}}


class OwnedSecretAdminMixin:
    """For an object another system signs its requests to with a secret (an inbound hook, a
    chat widget), whose runs belong to an owner. On the first save the owner is the creator
    unless a superuser chose another, and the secret is generated and shown once; afterwards it
    can only be replaced (the rotate action, which takes the change permission), never read.
    A subclass gives the service calls that make and replace the secret: `secret_new()` and
    `secret_rotate(obj)`, each returning the new secret.

    The secret is read only where it is shown: a secret the configured keys cannot decrypt
    (AGENTRY_ENCRYPTION_KEYS or SECRET_KEY changed) leaves the list and the object's page
    working, says so on the page, and is replaced by the rotate action as any other."""

    actions = ["rotate_secret"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("secret")

    @admin.display(description=gettext_lazy("secret"))
    def secret_status(self, obj):
        if not obj.pk:
            return "-"
        try:
            return mask(obj.secret)
        except SecretDecryptionError:
            return format_html(
                '<strong class="errornote">{}</strong>',
                _(
                    "Unreadable: the server's encryption keys cannot decrypt this secret, so every request "
                    "signed with it is refused. Rotate the secret (the action on the list) and give the new "
                    "one to the other system."
                ),
            )

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
