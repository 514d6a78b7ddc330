"""Seed 000's eval suite: the demo's four questions and its wrong-tool and no-tool cases, shipped
as JSON Lines (evals/fixtures/seed000.jsonl) so it can be read, diffed and re-imported as is."""

from pathlib import Path

from evals.services import eval_cases_import

DEMO_SUITE = "seed-000"
DEMO_CASES = Path(__file__).resolve().parent / "fixtures" / "seed000.jsonl"


def demo_suite_seed() -> int:
    """Create or refresh the suite from the shipped file; a case of the same name is replaced,
    so running it again changes nothing. Returns the number of cases imported."""
    return eval_cases_import(suite_name=DEMO_SUITE, lines=DEMO_CASES.read_text(encoding="utf-8").splitlines())
