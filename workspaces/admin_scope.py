"""The admin of a workspace's objects: what a page lists, offers and saves is the workspace's.

Every ModelAdmin and inline of a model with a workspace (its own `workspace` field or a
`workspace_path`) mixes in WorkspaceScopedAdmin (or WorkspaceScopedInline). Its queryset goes
through workspaces.access.in_workspace, so another workspace's object is not listed, counted or
searched, and its change, history and delete pages are a 404 (looked up in get_queryset; a
missing object is a 404 alike, where Django's admin would redirect naming its id). The choices
of a foreign key, a many-to-many, an autocomplete (answered by the related model's admin, itself
scoped) and a related-object list filter are the workspace's. An object with its own `workspace`
field is saved in the workspace the person acts in; only a superuser acting installation-wide
sees the field and chooses (empty: the first workspace). What an object refers to must be of its
workspace: the models' clean() (workspaces.references)."""

from django.contrib import admin
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.core.exceptions import FieldDoesNotExist
from django.http import Http404
from django.utils.translation import gettext_lazy as _

from workspaces.access import binding_of, in_workspace, obj_workspace_id, workspace_lookup
from workspaces.defaults import default_workspace_id


def chooses_workspace(request) -> bool:
    """Whether this person picks an object's workspace on its form: a superuser acting
    installation-wide. Everyone else saves into the workspace they act in."""
    return request.user.is_superuser and binding_of(request.user).workspace is None


def _owns_workspace(model) -> bool:
    return workspace_lookup(model) == "workspace"


def _related_scoped(formfield, db_field, request):
    """A relation's form field offering only the workspace's objects."""
    if formfield is not None and workspace_lookup(db_field.related_model) is not None:
        queryset = getattr(formfield, "queryset", None)
        if queryset is not None:
            formfield.queryset = in_workspace(queryset, request.user)
    return formfield


class WorkspaceRelatedFieldListFilter(admin.RelatedFieldListFilter):
    """A list filter on a relation naming only the workspace's objects (Django's names all)."""

    def field_choices(self, field, request, model_admin):
        queryset = in_workspace(field.related_model._default_manager.all(), request.user)
        ordering = self.field_admin_ordering(field, request, model_admin)
        if ordering:
            queryset = queryset.order_by(*ordering)
        return [(obj.pk, str(obj)) for obj in queryset]


def _scoped_list_filter(model, entry):
    if not isinstance(entry, str):
        return entry  # a filter class or a (field, filter class) pair chose its own choices
    try:
        field = get_fields_from_path(model, entry)[-1]
    except (FieldDoesNotExist, NotRelationField):
        return entry
    if field.is_relation and workspace_lookup(field.related_model) is not None:
        return (entry, WorkspaceRelatedFieldListFilter)
    return entry


def _form_in_workspace(form_class, workspace):
    """`form_class` whose object's workspace takes part in its validation. A new object is in
    `workspace` (when given) before it is validated: its clean() checks that what it refers to
    is of the same workspace. And its workspace is validated with it even where the field is not
    on the form (hidden, or read-only once saved): Django's form leaves out every check of a
    field it does not show, so a name taken in the workspace (workspaces.names) would pass the
    form and the database would refuse it with a 500 instead of a form error."""

    def __init__(self, *args, **kwargs):
        form_class.__init__(self, *args, **kwargs)
        if workspace is not None and self.instance._state.adding:
            self.instance.workspace = workspace

    def _get_validation_exclusions(self):
        exclude = form_class._get_validation_exclusions(self)
        if self.instance.workspace_id is not None:
            exclude.discard("workspace")
        return exclude

    attrs = {"__init__": __init__, "_get_validation_exclusions": _get_validation_exclusions}
    return type(form_class.__name__, (form_class,), {**attrs, "__module__": form_class.__module__})


class _RelationsScoped:
    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        formfield = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "workspace" and _owns_workspace(self.model) and formfield is not None:
            # Left empty, an object joins the installation's first workspace, as one saved
            # without a workspace anywhere else (workspaces.defaults): an upgraded installation's
            # superusers work as before.
            formfield.required = False
            formfield.initial = default_workspace_id()
            formfield.help_text = _("Empty: the installation's first workspace.")
            return formfield
        return _related_scoped(formfield, db_field, request)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        return _related_scoped(super().formfield_for_manytomany(db_field, request, **kwargs), db_field, request)

    def get_queryset(self, request):
        return in_workspace(super().get_queryset(request), request.user)


class WorkspaceScopedAdmin(_RelationsScoped):
    """For a ModelAdmin of a workspace's model (see the module's docstring)."""

    def get_object(self, request, object_id, from_field=None):
        # Django's admin answers an id it cannot find with a redirect and a message naming it;
        # another workspace's object (and a missing one, alike) is a 404.
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404
        return obj

    def get_list_filter(self, request):
        return [_scoped_list_filter(self.model, entry) for entry in super().get_list_filter(request)]

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        if not _owns_workspace(self.model):
            return fields
        fields = [name for name in fields if name != "workspace"]
        return ["workspace", *fields] if chooses_workspace(request) else fields

    def get_readonly_fields(self, request, obj=None):
        readonly = list(super().get_readonly_fields(request, obj))
        # Chosen once: an object moved to another workspace would leave behind what refers to it.
        if obj is not None and _owns_workspace(self.model) and chooses_workspace(request):
            readonly.append("workspace")
        return readonly

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if not _owns_workspace(self.model) or not self.fieldsets:
            return fieldsets  # built from get_fields above
        shown = [
            (title, {**options, "fields": [f for f in options["fields"] if f != "workspace"]})
            for title, options in fieldsets
        ]
        if chooses_workspace(request):
            shown[0][1]["fields"].insert(0, "workspace")
        return shown

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if _owns_workspace(self.model):
            form = _form_in_workspace(form, binding_of(request.user).workspace)
        return form


class _InlineFormSetInParent:
    """An inline formset whose new rows with their own `workspace` field join the parent's."""

    def _construct_form(self, i, **kwargs):
        form = super()._construct_form(i, **kwargs)
        if form.instance._state.adding and self.instance is not None:
            workspace_id = obj_workspace_id(self.instance)
            if workspace_id is not None:
                form.instance.workspace_id = workspace_id
        return form


class WorkspaceScopedInline(_RelationsScoped):
    """For an inline of a workspace's model: its rows' choices are the workspace's, and a row
    with its own `workspace` field is in its parent's (never shown)."""

    def get_exclude(self, request, obj=None):
        exclude = list(super().get_exclude(request, obj) or [])
        return [*exclude, "workspace"] if _owns_workspace(self.model) else exclude

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        if not _owns_workspace(self.model):
            return formset
        return type(formset.__name__, (_InlineFormSetInParent, formset), {})
