"""The API description a developer reads: every operation has a summary and a description, is
grouped under its resource, and the requests a client makes first come with an example."""

import pytest
from drf_spectacular.generators import SchemaGenerator

METHODS = {"get", "post", "put", "patch", "delete"}
# The requests a new client makes first: each shows a filled-in body.
WITH_EXAMPLES = {
    "conversations_create",
    "conversations_messages_create",
    "approvals_decision_create",
    "eval_suites_create",
    "eval_suites_cases_create",
    "eval_runs_create",
    "chat_completions",
}


@pytest.fixture(scope="module")
def operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = {}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                found[f"{method.upper()} {path}"] = operation
    assert len(found) >= 25
    return schema, found


def test_every_operation_has_a_summary_and_a_description(operations):
    _, found = operations
    missing = [name for name, op in found.items() if not op.get("summary") or not op.get("description")]
    assert missing == [], f"operations without a summary or a description: {missing}"


def test_operations_are_grouped_by_resource(operations):
    schema, found = operations
    declared = {tag["name"] for tag in schema.get("tags", [])}
    for name, op in found.items():
        assert op.get("tags"), name
        assert set(op["tags"]) <= declared, f"{name} is tagged {op['tags']}, not one of {sorted(declared)}"
        assert not op["operationId"].startswith("v1_"), name


def test_the_first_requests_come_with_examples(operations):
    _, found = operations
    by_id = {op["operationId"]: op for op in found.values()}
    assert WITH_EXAMPLES <= set(by_id)
    for operation_id in WITH_EXAMPLES:
        body = by_id[operation_id]["requestBody"]["content"]["application/json"]
        assert body.get("examples") or body.get("example"), f"{operation_id} has no example request"
