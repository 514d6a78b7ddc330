import sys

from django.core.management.base import BaseCommand, CommandError

from evals.jsonl import CaseLineInvalid, case_to_line
from evals.models import EvalSuite
from evals.services import eval_cases_import
from workspaces.cli import NAMES_HELP, workspace_id_or_first


class Command(BaseCommand):
    help = "Import an eval suite's cases from JSON Lines (created if new) or export them; '-' is stdin/stdout."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=("import", "export"))
        parser.add_argument("suite", help="eval suite name")
        parser.add_argument("path")
        parser.add_argument("--workspace", help=NAMES_HELP)

    def handle(self, *args, action, suite, path, **options):
        workspace_id = workspace_id_or_first(options["workspace"])
        if action == "export":
            found = EvalSuite.objects.filter(workspace_id=workspace_id, name=suite).first()
            if found is None:
                raise CommandError(f"No eval suite named {suite!r}.")
            lines = [case_to_line(case) + "\n" for case in found.cases.all()]
            if path == "-":
                self.stdout.write("".join(lines), ending="")
            else:
                with open(path, "w", encoding="utf-8") as out:
                    out.writelines(lines)
            return
        if not 0 < len(suite) <= EvalSuite._meta.get_field("name").max_length:
            raise CommandError("A suite name has 1 to 100 characters.")
        source = sys.stdin if path == "-" else open(path, encoding="utf-8")
        with source:
            lines = source.read().splitlines()
        try:
            count = eval_cases_import(suite_name=suite, lines=lines, workspace_id=workspace_id)
        except CaseLineInvalid as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"imported {count} cases into {suite}")
