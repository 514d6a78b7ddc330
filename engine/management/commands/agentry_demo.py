from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from conversations.services import conversation_create
from engine.admission import message_post
from engine.cli import RunWaitTimeout, format_run, pending_approvals, run_wait

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
    help = "Run seed 000's demo conversations through the real queue and print each run's timeline."

    def add_arguments(self, parser):
        parser.add_argument("--agent", default="customer-service")
        parser.add_argument(
            "--timeout", type=float, default=120, help="seconds to wait for each run, approvals included"
        )

    def handle(self, *args, agent, timeout, **options):
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
