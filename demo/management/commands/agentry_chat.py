from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from conversations.end_users import EndUserInvalid, end_user_clean
from conversations.models import Conversation
from conversations.services import conversation_create
from demo.cli import RunWaitTimeout, format_run, pending_approvals, run_wait
from engine.admission import message_post


class Command(BaseCommand):
    help = "Send one message to an agent through the real queue, wait for the run and print its timeline."

    def add_arguments(self, parser):
        parser.add_argument("message")
        parser.add_argument("--agent", default="customer-service", help="agent slug")
        parser.add_argument("--conversation", help="continue this conversation id")
        parser.add_argument(
            "--end-user",
            default="",
            help="speak as this end user (your id for them): a new conversation is theirs, and the agent's memory "
            "of them applies",
        )
        parser.add_argument(
            "--timeout", type=float, default=120, help="seconds to wait for the run, approvals included"
        )

    def handle(self, *args, message, agent, conversation, timeout, end_user, **options):
        try:
            end_user = end_user_clean(end_user)
        except EndUserInvalid as exc:
            raise CommandError(f"--end-user: {exc}") from None
        if conversation:
            conv = Conversation.objects.filter(pk=conversation).first()
            if conv is None:
                raise CommandError(f"No conversation {conversation}.")
            if end_user and conv.end_user != end_user:
                # A conversation's end user is fixed when it starts.
                raise CommandError(f"Conversation {conversation} is not with end user {end_user!r}.")
        else:
            found = Agent.objects.filter(slug=agent).first()
            if found is None:
                raise CommandError(f"No agent with slug {agent!r}; run agentry_seed_demo first.")
            conv = conversation_create(agent=found, title=message[:80], end_user=end_user)
        run = message_post(conversation=conv, content=message)
        try:
            run = run_wait(run_id=run.pk, timeout=timeout, on_park=self._report_park)
        except RunWaitTimeout as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"conversation {conv.pk}")
        self.stdout.write(format_run(run))

    def _report_park(self, run):
        # Approving, editing or rejecting happens elsewhere; the command waits and prints the outcome.
        self.stdout.write("\n".join(pending_approvals(run)))
