"""Seed 000's eval suite: the demo's four questions and its wrong-tool and no-tool cases, shipped
as JSON Lines (demo/fixtures/seed000.jsonl) so it can be read, diffed and re-imported as is."""

import json
from pathlib import Path

from evals.models import EvalCase
from evals.services import eval_cases_import
from workspaces.defaults import default_workspace_id

DEMO_SUITE = "seed-000"
DEMO_CASES = Path(__file__).resolve().parent / "fixtures" / "seed000.jsonl"


def demo_suite_seed(*, reset: bool = False) -> int:
    """Add the shipped cases the suite lacks, leaving the cases an operator edited as they are;
    with `reset`, every shipped case replaces the one of its name. Returns how many were written."""
    lines = [line for line in DEMO_CASES.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not reset:
        cases = EvalCase.objects.filter(suite__workspace_id=default_workspace_id(), suite__name=DEMO_SUITE)
        present = set(cases.values_list("name", flat=True))
        lines = [line for line in lines if json.loads(line)["name"] not in present]
    return eval_cases_import(suite_name=DEMO_SUITE, lines=lines)
