import json
import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from conversations.models import Approval
from conversations.services import conversation_create
from demo.cli import RunWaitTimeout, format_run, format_run_tree, pending_approvals, run_tree_wait, run_wait
from demo.customer_service import CUSTOMER_SERVICE_QUESTIONS, customer_service_seed
from demo.orders import order_service_start_or_reuse
from engine.admission import message_post
from engine.approvals import APPROVE, approval_decide
from tools.models import ToolDefinition

# Seed 000's three conversations: the first two share one conversation, as in the seed.
QUESTIONS = [
    (0, "你是谁？"),
    (0, "我在成都，明天天气如何？"),
    (
        1,
        "我在成都南站，明天要去成都动物园。如果明天下雨，请帮我规划一下驾驶路线。如果明天不下雨，给我规划一下骑行路线。",
    ),
    (
        2,
        "我在重庆北站，明天要去重庆动物园。如果明天下雨，请帮我规划一下驾驶路线。如果明天不下雨，给我规划一下骑行路线。",
    ),
]


class Command(BaseCommand):
    help = (
        "Run seed 000's demo conversations through the real queue and print each run's timeline; "
        "with --customer-service, seed and run seed 001's customer-service system and print each run tree."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", default="customer-service")
        parser.add_argument(
            "--timeout", type=float, default=120, help="seconds to wait for each run, approvals included"
        )
        parser.add_argument(
            "--customer-service",
            action="store_true",
            help="Seed 001's system: intent router, order, after-sales and quality-check agents, FAQ base.",
        )
        parser.add_argument(
            "--llm-base-url", default=os.environ.get("AGENTRY_DEMO_LLM_URL", "http://127.0.0.1:8901/v1")
        )
        parser.add_argument(
            "--order-service-port",
            type=int,
            default=8902,
            help="loopback port of the demo order service: the one listening there (scripts/dev.sh runs it), "
            "else one the command starts for its duration (0: any free port)",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Put the customer-service demo's agents, tools and FAQ back to the shipped configuration, "
            "undoing an operator's edits (otherwise only what is missing is created).",
        )
        parser.add_argument(
            "--approver", default="", help="user who approves the address change (default: the first superuser)"
        )

    def handle(self, *args, agent, timeout, customer_service, **options):
        if customer_service:
            self._customer_service(timeout=timeout, **options)
            return
        found = Agent.objects.filter(slug=agent).first()
        if found is None:
            raise CommandError(f"No agent with slug {agent!r}; run agentry_seed_demo first.")
        conversations = {}
        for index, question in QUESTIONS:
            if index not in conversations:
                conversations[index] = conversation_create(agent=found, title=question[:80])
            run = message_post(conversation=conversations[index], content=question)
            self.stdout.write(self.style.MIGRATE_HEADING(f"\n用户: {question}"))
            try:
                run = run_wait(run_id=run.pk, timeout=timeout, on_park=self._report_park)
            except RunWaitTimeout as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(format_run(run))

    def _report_park(self, run):
        # Approving, editing or rejecting happens elsewhere; the command waits and prints the outcome.
        self.stdout.write("\n".join(pending_approvals(run)))

    def _customer_service(self, *, timeout, llm_base_url, order_service_port, approver, reset, **options):
        users = get_user_model().objects.filter(is_active=True)
        self.approver = users.filter(username=approver).first() if approver else users.filter(is_superuser=True).first()
        if self.approver is None:
            raise CommandError("No user to approve the address change: run agentry_ensure_admin or pass --approver.")
        url, server = order_service_start_or_reuse(port=order_service_port)
        try:
            router = customer_service_seed(llm_base_url=llm_base_url, order_service_url=url, reset=reset)
            where = f"order service at {url}" + (" (already running)" if server is None else "")
            self.stdout.write(self.style.SUCCESS(f"Customer-service demo ready: {router.name}, {where}"))
            self._warn_other_order_service(url)
            for question in CUSTOMER_SERVICE_QUESTIONS:
                conversation = conversation_create(agent=router, title=question[:80])
                run = message_post(conversation=conversation, content=question)
                self.stdout.write(self.style.MIGRATE_HEADING(f"\n用户: {question}"))
                try:
                    run = run_tree_wait(run_id=run.pk, timeout=timeout, on_pending=self._approve)
                except RunWaitTimeout as exc:
                    raise CommandError(str(exc)) from exc
                self.stdout.write(format_run_tree(run))
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()

    def _warn_other_order_service(self, url: str) -> None:
        # Seeding leaves an existing tool's URL as it is: say so when it is not this service.
        elsewhere = ToolDefinition.objects.filter(name__in=["get_order", "change_address"]).exclude(
            http_url__startswith=f"{url}/"
        )
        for tool in elsewhere:
            self.stdout.write(
                self.style.WARNING(
                    f"Tool {tool.name} calls {tool.http_url}, not the order service at {url}; --reset points it here."
                )
            )

    def _approve(self, approval: Approval):
        self.stdout.write(
            f"  waiting for approval {approval.pk} (run {approval.run_id}): {approval.invocation.tool_name} "
            f"{json.dumps(approval.arguments, ensure_ascii=False)}"
        )
        decided = approval_decide(
            approval_id=approval.pk, user=self.approver, decision=APPROVE, channel=Approval.Channel.ADMIN
        )
        self.stdout.write(f"  approval {decided.pk}: {decided.status} by {self.approver.get_username()}")
