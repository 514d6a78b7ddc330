import json
import os

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from agents.services import agent_version_current
from agents.snapshot import model_input_kinds
from attachments.services import attachment_store
from attachments.sniff import AttachmentRefused
from conversations.end_users import EndUserInvalid, end_user_clean
from conversations.models import Approval, RunStatus, RunTrigger
from conversations.services import conversation_create
from demo.cli import (
    RunWaitTimeout,
    format_run,
    format_run_tree,
    memories_shown_line,
    memory_change_lines,
    pending_approvals,
    run_tree_wait,
    run_wait,
)
from demo.customer_service import (
    CUSTOMER_SERVICE_QUESTIONS,
    ORDER_FORM_QUESTION,
    PHOTO_MESSAGE,
    customer_service_seed,
    demo_widget_seed,
)
from demo.memory import MEMORY_END_USER, MEMORY_QUESTIONS, extraction_wait, memory_demo_fresh_start
from demo.orders import order_service_start_or_reuse
from demo.pictures import PHOTO
from demo.seed import demo_memory_seed
from engine.admission import message_post, message_submit
from engine.approvals import APPROVE, approval_decide
from tools.models import ToolDefinition
from workspaces.defaults import default_workspace_id

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
        "with --customer-service, seed and run seed 001's customer-service system and print each run tree; "
        "with --memory, seed the agent with long-term memory and show one end user remembered across conversations."
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
            "--memory",
            action="store_true",
            help="Seed 000's agent with long-term memory: one end user says where they live, then asks the weather "
            "in new conversations; each run's timeline with the memories it was shown and the changes it made.",
        )
        parser.add_argument(
            "--end-user", default=MEMORY_END_USER, help="the end user of the memory scene's conversations"
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
            help="Put the customer-service demo's agents, tools and FAQ (with --memory: the memory demo agent) back "
            "to the shipped configuration, undoing an operator's edits (otherwise only what is missing is created).",
        )
        parser.add_argument(
            "--approver", default="", help="user who approves the address change (default: the first superuser)"
        )

    def handle(self, *args, agent, timeout, customer_service, memory, **options):
        if customer_service:
            self._customer_service(timeout=timeout, **options)
            return
        if memory:
            self._memory(timeout=timeout, **options)
            return
        found = Agent.objects.filter(slug=agent).first()
        if found is None:
            raise CommandError(f"No agent with slug {agent!r}; run agentry_seed_demo first.")
        conversations = {}
        for index, question in QUESTIONS:
            if index not in conversations:
                conversations[index] = conversation_create(agent=found, title=question[:80])
            run = message_post(conversation=conversations[index], content=question, trigger=RunTrigger.CLI)
            self.stdout.write(self.style.MIGRATE_HEADING(f"\n用户: {question}"))
            try:
                run = run_wait(run_id=run.pk, timeout=timeout, on_park=self._report_park)
            except RunWaitTimeout as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(format_run(run))

    def _memory(self, *, timeout, llm_base_url, end_user, reset, **options):
        try:
            end_user = end_user_clean(end_user)
        except EndUserInvalid as exc:
            raise CommandError(f"--end-user: {exc}") from None
        if not end_user:
            raise CommandError("--end-user must name someone: memory is kept per end user.")
        agent = demo_memory_seed(llm_base_url=llm_base_url, reset=reset)
        self.stdout.write(self.style.SUCCESS(f"Memory demo ready: {agent.name} ({agent.slug}), end user {end_user}"))
        forgotten = memory_demo_fresh_start(agent=agent, end_user=end_user)
        if forgotten:
            noun = "memory" if forgotten == 1 else "memories"
            self.stdout.write(f"Deleted {forgotten} {noun} of {end_user} left by an earlier showing.")
        for question in MEMORY_QUESTIONS:
            conversation = conversation_create(agent=agent, title=question[:80], end_user=end_user)
            run = message_post(conversation=conversation, content=question, trigger=RunTrigger.CLI)
            self.stdout.write(self.style.MIGRATE_HEADING(f"\n用户 {end_user}（新对话）: {question}"))
            try:
                run = run_wait(run_id=run.pk, timeout=timeout, on_park=self._report_park)
                # The next conversation must find what this one taught the memory.
                extraction = extraction_wait(run=run, timeout=timeout) if run.status == RunStatus.COMPLETED else None
            except RunWaitTimeout as exc:
                raise CommandError(str(exc)) from exc
            shown = memories_shown_line(run=run)
            if shown:
                self.stdout.write(shown)
            self.stdout.write(format_run(run))
            if extraction is not None:
                self.stdout.write("\n".join(memory_change_lines(run=run, extraction=extraction)))

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
            demo_widget_seed(agent=router, owner=self.approver)
            where = f"order service at {url}" + (" (already running)" if server is None else "")
            self.stdout.write(self.style.SUCCESS(f"Customer-service demo ready: {router.name}, {where}"))
            self._warn_other_order_service(url)
            for question in [*CUSTOMER_SERVICE_QUESTIONS, ORDER_FORM_QUESTION]:
                conversation = conversation_create(agent=router, title=question[:80])
                run = message_post(conversation=conversation, content=question, trigger=RunTrigger.CLI)
                self.stdout.write(self.style.MIGRATE_HEADING(f"\n用户: {question}"))
                try:
                    run = run_tree_wait(run_id=run.pk, timeout=timeout, on_pending=self._approve)
                except RunWaitTimeout as exc:
                    raise CommandError(str(exc)) from exc
                self.stdout.write(format_run_tree(run))
            self._photo(router=router, timeout=timeout)
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()

    def _photo(self, *, router, timeout):
        """The customer's photo of the broken mug, stored as an attachment (its EXIF stripped) and
        sent with a message through the queue, like the questions."""
        snapshot = agent_version_current(agent=router).snapshot
        if "image" not in model_input_kinds(snapshot["model"]):
            self.stdout.write(
                self.style.WARNING(
                    f"{router.name}'s model config does not take images: the photo is not sent (--reset puts it back)."
                )
            )
            return
        try:
            photo = attachment_store(
                workspace=router.workspace,
                uploaded_by=self.approver,
                owner=None,
                data=PHOTO.read_bytes(),
                name=PHOTO.name,
            )
        except AttachmentRefused as exc:
            raise CommandError(f"The demo photo was refused: {exc}") from exc
        conversation = conversation_create(agent=router, title=PHOTO_MESSAGE[:80])
        run = message_submit(
            conversation=conversation, content=PHOTO_MESSAGE, trigger=RunTrigger.CLI, attachments=[photo]
        ).run
        self.stdout.write(
            self.style.MIGRATE_HEADING(
                f"\n用户: {PHOTO_MESSAGE} [{photo.name}: {photo.media_type}, {photo.width}×{photo.height}, "
                f"{photo.size} bytes, EXIF stripped]"
            )
        )
        try:
            run = run_tree_wait(run_id=run.pk, timeout=timeout, on_pending=self._approve)
        except RunWaitTimeout as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(format_run_tree(run))

    def _warn_other_order_service(self, url: str) -> None:
        # Seeding leaves an existing tool's URL as it is: say so when it is not this service.
        names = ["get_order", "change_address"]
        elsewhere = ToolDefinition.objects.filter(workspace_id=default_workspace_id(), name__in=names).exclude(
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
