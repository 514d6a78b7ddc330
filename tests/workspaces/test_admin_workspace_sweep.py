"""The admin and workspaces: a member of workspace A reads, counts, filters and chooses nothing of
workspace B on any admin page; each role opens and offers exactly what its row of permissions
says. Both sweeps walk admin.site's registry, so a model registered later is covered."""

import re

import pytest
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.test import RequestFactory
from django.urls import reverse

from tests.support.factories import make_user
from tests.workspaces.admin_two_workspaces import MARKER, workspace_seed
from workspaces.access import workspace_lookup
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline
from workspaces.defaults import default_workspace_id
from workspaces.membership import membership_set
from workspaces.models import Membership, Workspace
from workspaces.roles import Role, role_permissions

pytestmark = pytest.mark.django_db

ROLES = [Role.OWNER, Role.BUILDER, Role.OPERATOR, Role.APPROVER, Role.VIEWER]


def _scoped_admins():
    """Every registered admin of a model that lives in a workspace."""
    return [(model, model_admin) for model, model_admin in admin.site._registry.items() if workspace_lookup(model)]


def _in(model, workspace):
    return model._default_manager.filter(**{f"{workspace_lookup(model)}_id": workspace.pk})


def _shown(page) -> str:
    """A page's text without its CSRF token (random letters that may spell the marker)."""
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", page.content.decode()).lower()


def _url(model, view, obj=None):
    name = f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}"
    return reverse(name, args=[quote(obj.pk)] if obj is not None else [])


@pytest.fixture
def two_workspaces():
    first = Workspace.objects.get(pk=default_workspace_id())
    zulu = Workspace.objects.create(name=f"{MARKER} team", slug=MARKER)
    member, stranger = make_user(staff=True), make_user(staff=True)
    membership_set(user=member, workspace=first, role=Role.OWNER)
    membership_set(user=stranger, workspace=zulu, role=Role.OWNER)
    seeds = {
        "a": workspace_seed(first, "alpha", token_user=member),
        "b": workspace_seed(zulu, MARKER, token_user=stranger),
    }
    return first, zulu, member, seeds


def test_every_workspace_models_admin_and_inline_is_scoped():
    unscoped = []
    for model, model_admin in admin.site._registry.items():
        if workspace_lookup(model) and not isinstance(model_admin, WorkspaceScopedAdmin):
            unscoped.append(model._meta.label)
        for inline in model_admin.inlines:
            if workspace_lookup(inline.model) and not issubclass(inline, WorkspaceScopedInline):
                unscoped.append(f"{model._meta.label} inline {inline.__name__}")
    assert unscoped == []


def test_each_workspace_has_an_object_of_every_scoped_admins_model(two_workspaces):
    # Else the sweep below would pass for a model without looking at it: seed it in
    # tests/workspaces/admin_two_workspaces.py.
    first, zulu, _member, _seeds = two_workspaces
    missing = [
        f"{model._meta.label} in {workspace.slug}"
        for model, _admin in _scoped_admins()
        for workspace in (first, zulu)
        if not _in(model, workspace).exists()
    ]
    assert missing == []


def test_a_member_of_one_workspace_reads_counts_and_chooses_nothing_of_another_in_the_admin(client, two_workspaces):
    first, zulu, member, _seeds = two_workspaces
    client.force_login(member)
    for model, model_admin in _scoped_admins():
        label = model._meta.label
        page = client.get(_url(model, "changelist"))
        assert page.status_code == 200, label
        assert MARKER not in _shown(page), label
        changelist = page.context["cl"]
        theirs = set(_in(model, zulu).values_list("pk", flat=True))
        assert changelist.result_count == _in(model, first).count(), label
        assert not {obj.pk for obj in changelist.result_list} & theirs, label
        for spec in changelist.filter_specs:
            related = getattr(getattr(spec, "field", None), "related_model", None)
            if related is not None and workspace_lookup(related) and hasattr(spec, "lookup_choices"):
                offered = {pk for pk, _name in spec.lookup_choices}
                assert not offered & set(_in(related, zulu).values_list("pk", flat=True)), (label, spec.title)

        for obj in _in(model, zulu):
            for view in ("change", "history", "delete"):
                assert client.get(_url(model, view, obj)).status_code == 404, (label, view)
            assert client.post(_url(model, "delete", obj), {"post": "yes"}).status_code == 404, label
            assert model._default_manager.filter(pk=obj.pk).exists(), label

        # Its own objects' pages and the add page offer none of the other workspace's objects.
        own = _in(model, first).first()
        page = client.get(_url(model, "change", own))
        assert page.status_code == 200, label
        assert MARKER not in _shown(page), label
        if model_admin.has_add_permission(page.wsgi_request):
            page = client.get(_url(model, "add"))
            assert page.status_code == 200, label
            assert MARKER not in _shown(page), label


def test_an_autocomplete_offers_only_the_workspaces_objects(client, two_workspaces):
    _first, _zulu, member, seeds = two_workspaces
    client.force_login(member)
    found = client.get(
        "/admin/autocomplete/",
        {"app_label": "agents", "model_name": "agenttool", "field_name": "tool", "term": "tool-"},
    ).json()
    assert [item["text"] for item in found["results"]] == [str(seeds["a"]["tool"])]


@pytest.mark.parametrize("role", ROLES)
def test_each_role_opens_and_offers_in_the_admin_what_its_permissions_say(client, two_workspaces, role):
    first, _zulu, member, _seeds = two_workspaces
    Membership.objects.filter(user=member, workspace=first).update(role=role)
    granted = role_permissions(role)
    # What each admin offers anyone at all (a ledger row is never changed, say): a superuser
    # acting installation-wide is refused only that.
    everyone = RequestFactory().get("/")
    everyone.user = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(member)
    for model, model_admin in _scoped_admins():
        opts, label = model._meta, model._meta.label

        def holds(action, opts=opts):
            return f"{opts.app_label}.{action}_{opts.model_name}" in granted

        page = client.get(_url(model, "changelist"))
        if not (holds("view") or holds("change")):
            assert page.status_code == 403, (role, label)
            continue
        assert page.status_code == 200, (role, label)
        assert page.context["has_add_permission"] == (holds("add") and model_admin.has_add_permission(everyone)), (
            role,
            label,
        )
        own = _in(model, first).first()
        page = client.get(_url(model, "change", own))
        assert page.status_code == 200, (role, label)
        for action in ("change", "delete"):
            offered = getattr(model_admin, f"has_{action}_permission")(everyone, own)
            assert page.context[f"has_{action}_permission"] == (holds(action) and offered), (role, label, action)
