"""The comparison: which differences are regressions, and that they come first; the command's
bad inputs."""

import pytest
from django.core.management import CommandError, call_command

from tests.evals.helpers import four_case_suite
from tests.support.factories import make_agent


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"agent": "nobody"}, "No agent"),
        ({"suite": "missing"}, "No eval suite"),
        ({"version": "99"}, "has no version '99'"),
        ({"against": "x"}, "has no version 'x'"),
        ({"repetitions": 0}, "--repetitions"),
        ({"max_rate_drop": -0.1}, "negative"),
    ],
)
def test_the_command_refuses_bad_inputs(arguments, said):
    agent = make_agent()
    four_case_suite()
    options = {"agent": agent.slug, "suite": "basics", "version": "current", "against": "current", **arguments}
    with pytest.raises(CommandError, match=said):
        call_command("agentry_eval", options.pop("agent"), **options)
