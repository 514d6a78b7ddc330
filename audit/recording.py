"""The receivers that write a ConfigChange for each create, change and delete of an audited
model (audit.registry), in the transaction of the write itself.

A change reads the row as stored before the save (one statement), so a form that saved a stale
instance still records what really changed; a save whose update_fields are all left out reads
and writes nothing. Writes that skip save() (QuerySet.update(), raw SQL) are not seen: the
configuration's own services save instances (tools.services, triggers.schedules).
"""

import json

from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ObjectDoesNotExist
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models.functions import Cast
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete, pre_save

from audit.context import origin_current
from audit.models import Action, ConfigChange
from audit.registry import AUDITED, MASK, Audited, audited
from conversations.models import ApiToken
from platform_site.crypto import EncryptedTextField, SecretDecryptionError, decrypt

# Set on an instance between its pre_* and post_* signals.
_BEFORE = "_audit_before"
_NAME = "_audit_name"
# A masked field of the row read before a change, as stored (audit_raw_<field>).
_RAW = "_audit_raw_"
# A secret that cannot be decrypted: differs from every value, so replacing it is a change.
_UNREADABLE = object()


def _plain(value):
    """A value as JSON would store it (decimals and times as text, keys as their ids)."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _stored(spec: Audited, model_field: models.Field, instance):
    """The field's value; for a masked field of a row just read, from its stored text (an
    encrypted secret that no longer decrypts must not stop the save that replaces it)."""
    column = _RAW + model_field.name
    if column not in instance.__dict__:
        return model_field.value_from_object(instance)
    raw = instance.__dict__[column] or ""
    if raw and isinstance(model_field, EncryptedTextField):
        try:
            return decrypt(raw)
        except SecretDecryptionError:
            return _UNREADABLE
    return raw


def _shown(spec: Audited, model_field: models.Field, value):
    if spec.masks(model_field):
        return MASK if value else ""
    return _plain(value)


def _changes(spec: Audited, before, after, names: set[str] | None) -> dict[str, list]:
    changes = {}
    for model_field in spec.fields:
        if names is not None and model_field.name not in names:
            continue
        old = _stored(spec, model_field, before) if before is not None else None
        new = _stored(spec, model_field, after) if after is not None else None
        if before is not None and after is not None and old == new:
            continue
        changes[model_field.name] = [
            _shown(spec, model_field, old) if before is not None else None,
            _shown(spec, model_field, new) if after is not None else None,
        ]
    return changes


def _name(spec: Audited, instance) -> str:
    try:
        return spec.name_of(instance)[:200]
    except ObjectDoesNotExist:
        # Its __str__ reads a related row that a cascade already removed.
        return f"{spec.model._meta.verbose_name} {instance.pk}"[:200]


def _record(spec: Audited, instance, *, action: str, changes: dict, name: str | None = None, using=None) -> None:
    origin = origin_current()
    actor, label, token_id = None, origin.label, None
    request = origin.request
    if request is not None:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            actor, label = user, user.get_username()
        # DRF puts the authenticated token on the request it wraps (api.auth).
        auth = getattr(request, "auth", None)
        if isinstance(auth, ApiToken):
            token_id = auth.pk
    ConfigChange.objects.using(using).create(
        action=action,
        source=origin.source,
        content_type=ContentType.objects.db_manager(using).get_for_model(spec.model),
        object_id=str(instance.pk),
        object_repr=name if name is not None else _name(spec, instance),
        agent_id=spec.agent_of(instance),
        workspace_id=spec.workspace_of(instance),
        actor=actor,
        actor_label=label[:150],
        api_token_id=token_id,
        changes=changes,
    )


def _names(spec: Audited, update_fields) -> set[str] | None:
    """The audited fields a save writes (update_fields may name a key by its attname), or None: all."""
    if update_fields is None:
        return None
    return {f.name for f in spec.fields if f.name in update_fields or f.attname in update_fields}


def _saving(sender, instance, raw, using, update_fields, **kwargs):
    spec = audited(sender)
    setattr(instance, _BEFORE, None)
    if raw or instance._state.adding:
        return
    if _names(spec, update_fields) == set():
        return
    stored = sender._base_manager.using(using).filter(pk=instance.pk)
    masked = [f.name for f in spec.fields if spec.masks(f)]
    if masked:
        # Read as stored text, not through the field (which decrypts): _stored.
        stored = stored.defer(*masked).annotate(**{_RAW + name: Cast(name, models.TextField()) for name in masked})
    setattr(instance, _BEFORE, stored.first())


def _saved(sender, instance, created, raw, using, update_fields, **kwargs):
    spec = audited(sender)
    before = instance.__dict__.pop(_BEFORE, None)
    if raw:
        return
    if created or before is None:
        if created and spec.creates:
            _record(spec, instance, action=Action.CREATE, changes=_changes(spec, None, instance, None), using=using)
        return
    changes = _changes(spec, before, instance, _names(spec, update_fields))
    if changes:
        _record(spec, instance, action=Action.CHANGE, changes=changes, using=using)


def _deleting(sender, instance, using, **kwargs):
    # Named before the cascade removes what its __str__ may read.
    setattr(instance, _NAME, _name(audited(sender), instance))


def _deleted(sender, instance, using, **kwargs):
    spec = audited(sender)
    name = instance.__dict__.pop(_NAME, None)
    _record(spec, instance, action=Action.DELETE, changes=_changes(spec, instance, None, None), name=name, using=using)


def _m2m_ids(instance, field_name: str) -> list:
    return sorted(getattr(instance, field_name).values_list("pk", flat=True))


def _m2m_changed(sender, instance, action, reverse, model, pk_set, using, **kwargs):
    # Only an audited object's own side (an agent's allowed groups), not a group's agents.
    spec = audited(type(instance))
    if reverse or spec is None:
        return
    field_name = next(f.name for f in type(instance)._meta.many_to_many if f.remote_field.through is sender)
    if action in ("pre_add", "pre_remove", "pre_clear"):
        instance.__dict__.setdefault(_BEFORE + "_m2m", {})[field_name] = _m2m_ids(instance, field_name)
        return
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    before = instance.__dict__.get(_BEFORE + "_m2m", {}).pop(field_name, None)
    after = _m2m_ids(instance, field_name)
    if before is not None and before != after:
        _record(spec, instance, action=Action.CHANGE, changes={field_name: [before, after]}, using=using)


def receivers_connect() -> None:
    for spec in AUDITED:
        uid = f"audit.{spec.model._meta.label}"
        pre_save.connect(_saving, sender=spec.model, dispatch_uid=uid)
        post_save.connect(_saved, sender=spec.model, dispatch_uid=uid)
        pre_delete.connect(_deleting, sender=spec.model, dispatch_uid=uid)
        post_delete.connect(_deleted, sender=spec.model, dispatch_uid=uid)
        for many in spec.model._meta.many_to_many:
            # A through model of its own (an agent's tools: AgentTool) is audited as itself.
            if many.remote_field.through._meta.auto_created:
                m2m_changed.connect(_m2m_changed, sender=many.remote_field.through, dispatch_uid=uid)
