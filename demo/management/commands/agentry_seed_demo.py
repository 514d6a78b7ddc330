import os

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from demo.seed import DEGRADED_DESCRIPTION, DEMO_WEATHER_TOOL, demo_degrade_draft, demo_seed
from demo.suite import DEMO_SUITE, demo_suite_seed
from demo.workspaces import RESEARCHER, RESEARCHER_DEV_PASSWORD, research_workspace_seed
from evals.models import EvalCase
from workspaces.defaults import default_workspace_id
from workspaces.models import Workspace

User = get_user_model()


class Command(BaseCommand):
    help = (
        "Create the seed 000 demo agent, its model config (the shipped fake LLM), tools and eval suite where "
        "missing, leaving what exists as it is (--reset puts it all back); --degraded-version also publishes "
        "it (if never published) and degrades its draft. A second workspace, Research, gets its own model "
        "config, agent and member (researcher, a builder); the superusers belong to both."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--llm-base-url", default=os.environ.get("AGENTRY_DEMO_LLM_URL", "http://127.0.0.1:8901/v1")
        )
        parser.add_argument("--no-stream", action="store_true", help="Call the model without streaming.")
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Put the demo agent, its model config, tool descriptions and eval cases back to the shipped "
            "configuration, undoing an operator's edits and the degraded draft.",
        )
        parser.add_argument(
            "--dev-default",
            action="store_true",
            help=f"Without AGENTRY_DEMO_RESEARCHER_PASSWORD, make the member {RESEARCHER!r} with the password "
            f"{RESEARCHER_DEV_PASSWORD!r}: for a stack on loopback only (without either, no such account is made).",
        )
        parser.add_argument(
            "--degraded-version",
            action="store_true",
            help="Publish the demo agent if it never was, then give its draft a vague weather tool description "
            "(for this agent only), for an eval of the draft against the published version to catch.",
        )

    def handle(self, *args, llm_base_url, no_stream, reset, degraded_version, dev_default=False, **options):
        agent = demo_seed(llm_base_url=llm_base_url, stream=not no_stream, reset=reset)
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo agent {'reset' if reset else 'ready'}: {agent.name} (slug {agent.slug}), "
                f"model at {agent.model_config.base_url}"
            )
        )
        self._research_seed(llm_base_url=llm_base_url, stream=not no_stream, reset=reset, dev_default=dev_default)
        written = demo_suite_seed(reset=reset)
        total = EvalCase.objects.filter(suite__workspace_id=default_workspace_id(), suite__name=DEMO_SUITE).count()
        self.stdout.write(self.style.SUCCESS(f"Eval suite {DEMO_SUITE}: {total} cases ({written} written now)"))
        if degraded_version:
            demo_degrade_draft(agent=agent)
            agent.refresh_from_db()
            self.stdout.write(
                self.style.WARNING(
                    f"Published version: {agent.published_version.number}; the draft describes {DEMO_WEATHER_TOOL} "
                    f"as {DEGRADED_DESCRIPTION!r}. Compare: manage.py agentry_eval {agent.slug} --suite {DEMO_SUITE} "
                    "--version draft --against published"
                )
            )

    def _research_seed(self, *, llm_base_url, stream, reset, dev_default):
        password = os.environ.get("AGENTRY_DEMO_RESEARCHER_PASSWORD", "")
        if password:
            try:
                validate_password(password)
            except ValidationError as exc:
                raise CommandError("AGENTRY_DEMO_RESEARCHER_PASSWORD is too weak: " + " ".join(exc.messages)) from None
        elif dev_default:
            password = RESEARCHER_DEV_PASSWORD
        seeded = research_workspace_seed(
            llm_base_url=llm_base_url, password=password or None, stream=stream, reset=reset
        )
        first = Workspace.objects.order_by("id").first()
        self.stdout.write(
            self.style.SUCCESS(
                f"Workspaces: {first.name} (everything above) and {seeded.workspace.name} "
                f"(agent {seeded.agent.slug} on its own model config)"
            )
        )
        if seeded.researcher_created:
            shown = (
                "from AGENTRY_DEMO_RESEARCHER_PASSWORD"
                if password != RESEARCHER_DEV_PASSWORD
                else (f"{RESEARCHER_DEV_PASSWORD!r}: for this machine only")
            )
            self.stdout.write(
                self.style.WARNING(f"Member {RESEARCHER!r} (builder in Research) created, password {shown}.")
            )
        elif not password and not User.objects.filter(username=RESEARCHER).exists():
            self.stdout.write(
                f"No member {RESEARCHER!r} made: set AGENTRY_DEMO_RESEARCHER_PASSWORD (or --dev-default on loopback)."
            )
        self.stdout.write(
            f"Switch workspace with the menu in every page's header (the admin belongs to both); "
            f"{RESEARCHER} sees only {seeded.workspace.name}. An API token acts in the workspace it was made in."
        )
