"""Serializer fields built once per class and copied per instance (api.common.FieldsBuiltOnce):
each instance binds fields of its own, nested ones included, and answers as DRF's would."""

from rest_framework import serializers

from api.common import FieldsBuiltOnce
from api.runs import RunSerializer


class Inner(serializers.Serializer):
    n = serializers.IntegerField()


class Plain(serializers.Serializer):
    name = serializers.CharField(max_length=5)
    tags = serializers.ListField(child=serializers.CharField())
    inner = Inner()


class Once(FieldsBuiltOnce, Plain):
    pass


def test_each_instance_binds_fields_of_its_own_nested_ones_included():
    first, second = Once(), Once()
    for name in ("name", "tags", "inner"):
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first and second.fields[name].parent is second
    assert first.fields["tags"].child is not second.fields["tags"].child
    assert first.fields["tags"].child.parent is first.fields["tags"]
    assert first.fields["inner"].fields["n"] is not second.fields["inner"].fields["n"]
    assert first.fields["inner"].fields["n"].parent is first.fields["inner"]


def test_it_validates_and_answers_as_the_plain_serializer_does():
    data = {"name": "ab", "tags": ["x", "y"], "inner": {"n": "3"}}
    ours, drfs = Once(data=data), Plain(data=data)
    assert ours.is_valid() and drfs.is_valid()
    assert ours.validated_data == drfs.validated_data
    too_long = {**data, "name": "abcdefg"}
    ours, drfs = Once(data=too_long), Plain(data=too_long)
    assert not ours.is_valid() and not drfs.is_valid()
    assert ours.errors == drfs.errors
    answer = {"name": "ab", "tags": ["x"], "inner": {"n": 3}}
    assert Once(answer).data == Plain(answer).data == answer


def test_the_run_serializers_fields_are_those_drf_builds():
    class Drfs(RunSerializer):
        def get_fields(self):
            return serializers.ModelSerializer.get_fields(self)

    ours, drfs = RunSerializer().fields, Drfs().fields
    assert list(ours) == list(drfs)
    for name in ours:
        assert type(ours[name]) is type(drfs[name]), name
        assert ours[name].source == drfs[name].source and ours[name].read_only == drfs[name].read_only, name


_COPY_HOOKS = ("__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__slots__")


def _built_once_fields():
    from api.conversations import MessageCreateSerializer

    for serializer in (RunSerializer(), MessageCreateSerializer(), Once()):
        assert serializer.fields  # builds the class's list once
        yield from (field for _name, field, nested in type(serializer)._fields_built if not nested)


def test_every_plain_field_built_once_copies_as_copy_copy_does():
    # _shallow skips copy's protocol: only right for classes that define none of its hooks below
    # object and Field (a field class that adds one must be deep-copied or handled here).
    import copy

    from api.common import _holds_fields, _shallow

    checked = 0
    for field in _built_once_fields():
        assert not _holds_fields(field)
        for cls in type(field).__mro__:
            if cls is object:
                continue
            own = [hook for hook in _COPY_HOOKS if hook in vars(cls)]
            assert not own, (type(field), cls, own)
        ours, theirs = _shallow(field), copy.copy(field)
        assert type(ours) is type(theirs) and vars(ours) == vars(theirs) and ours is not field
        assert vars(ours) is not vars(field)
        checked += 1
    assert checked >= 20
