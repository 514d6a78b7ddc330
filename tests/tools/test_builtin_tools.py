"""The built-in tools: time, calculator and a guarded, trimmed URL fetch."""

import pytest

from tests.support.servers import petstore  # noqa: F401 (fixture
from tests.unit.tools.test_builtin_tools import call
from tools.models import ToolDefinition
from tools.services import tool_definitions_sync_from_registry


@pytest.mark.parametrize(
    "expression,result",
    [
        ("1 + 2 * 3", "7"),
        ("(1250 * 1.08) / 12", "112.5"),
        ("2 ** 10", "1024"),
        ("sqrt(16) + abs(-2)", "6.0"),
        ("round(pi, 3)", "3.142"),
        ("7 // 2 + 7 % 2", "4"),
    ],
)
def test_calculator_evaluates_arithmetic(expression, result):
    outcome = call("calculator", expression=expression)
    assert outcome.status == "succeeded"
    assert outcome.content.endswith(f'"result":{result}}}')


@pytest.mark.parametrize(
    "expression",
    [
        "(1).__class__",
        "().__class__.__bases__",
        "'a'.upper()",
        "sqrt.__globals__",
        "calculator.__code__",
    ],
)
def test_calculator_refuses_attribute_access(expression):
    outcome = call("calculator", expression=expression)
    assert outcome.status == "error"
    assert "Attribute access" in outcome.content and "not allowed" in outcome.content


@pytest.mark.parametrize("expression", ["9 ** 9 ** 9", "10 ** 1001", "2 ** 100000", "(10 ** 999) * (10 ** 999)"])
def test_calculator_refuses_huge_powers_quickly(expression):
    outcome = call("calculator", expression=expression)
    assert outcome.status == "error" and "too large" in outcome.content


@pytest.mark.parametrize(
    "expression,message",
    [
        ("1 / 0", "Division by zero"),
        ("x + 1", "'x' is not defined"),
        ("[1, 2][0]", "Subscript"),
        ("'abc'", "Only numbers"),
        ("exp(1000)", "math range error"),
        ("1 +", "not a valid arithmetic expression"),
        ("__import__('os')", "__import__"),
    ],
)
def test_calculator_explains_what_it_cannot_do(expression, message):
    outcome = call("calculator", expression=expression)
    assert outcome.status == "error" and message in outcome.content


def test_fetch_url_returns_page_text_without_markup(petstore):
    outcome = call("fetch_url", url=f"{petstore.base_url}/page")
    assert outcome.status == "succeeded"
    assert "Title: Agentry test page" in outcome.content
    assert "Hello\nFirst paragraph." in outcome.content
    assert "secret" not in outcome.content and "color:red" not in outcome.content and "<p>" not in outcome.content


def test_fetch_url_trims_long_pages_and_says_so(petstore):
    outcome = call("fetch_url", url=f"{petstore.base_url}/page?words=3000")
    assert outcome.status == "succeeded" and outcome.truncated
    assert len(outcome.content) < 6100
    assert outcome.content.rstrip().endswith("more characters omitted]")


def test_fetch_url_refuses_binary_and_errors(petstore):
    assert "image/png, not text" in call("fetch_url", url=f"{petstore.base_url}/image").content
    assert "HTTP 404" in call("fetch_url", url=f"{petstore.base_url}/pets/999").content


def test_fetch_url_cannot_reach_the_metadata_service(settings):
    settings.AGENTRY_OUTBOUND_ALLOWLIST = []
    outcome = call("fetch_url", url="http://169.254.169.254/latest/meta-data/")
    assert outcome.status == "error"
    assert "Cannot connect to 169.254.169.254: the host is not allowed" in outcome.content
    assert "link-local" in outcome.error


@pytest.mark.django_db
def test_sync_registers_the_built_ins_as_tool_definitions():
    tool_definitions_sync_from_registry()
    tools = {t.name: t for t in ToolDefinition.objects.filter(name__in=["current_time", "calculator", "fetch_url"])}
    assert set(tools) == {"current_time", "calculator", "fetch_url"}
    assert all(t.kind == "python" and t.side_effect == "read" for t in tools.values())
    assert tools["calculator"].parameters["required"] == ["expression"]
