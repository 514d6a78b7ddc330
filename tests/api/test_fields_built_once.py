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
