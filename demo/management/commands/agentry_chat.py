import time
from pathlib import Path

from django.core.files import File
from django.core.management.base import BaseCommand, CommandError

from agents.models import Agent
from attachments.limits import per_message_check
from attachments.services import attachment_store
from attachments.sniff import AttachmentRefused
from conversations.end_users import EndUser, EndUserInvalid, end_user_clean, end_user_conversations
from conversations.models import Conversation, RunTrigger
from demo.cli import RunWaitTimeout, approval_waiting_lines, format_run_tree, run_tree_wait, site_url
from engine.admission import conversation_start, message_submit
from engine.admission_limits import AdmissionRefused
from workspaces.access import of_workspace
from workspaces.cli import workspace_argument, workspace_argument_add


class Command(BaseCommand):
    help = (
        "Send one message to an agent through the real queue, wait for the run (and the runs it delegates to) "
        "and print its timeline. A call that waits for approval is printed with where to decide it. Images, files "
        "and audio go with it by --attach."
    )

    def add_arguments(self, parser):
        parser.add_argument("message")
        parser.add_argument("--agent", default="customer-service", help="agent slug")
        parser.add_argument("--conversation", help="continue this conversation id")
        parser.add_argument(
            "--end-user",
            default="",
            help="speak as this end user of the platform's own (no application owns them, so no token speaks for "
            "them): a new conversation is theirs, and the agent's memory of them applies. Forget them in the admin, "
            "or through the API with ?owner=none (staff with the permission to forget end users)",
        )
        parser.add_argument(
            "--attach",
            action="append",
            default=[],
            metavar="PATH",
            help="send this file with the message (an image, a document, text or audio; repeat for more): stored as "
            "POST /api/v1/attachments/ stores it, and refused for the same reasons",
        )
        workspace_argument_add(parser, rows="agents and conversations")
        parser.add_argument(
            "--timeout", type=float, default=120, help="seconds to wait for the run, approvals included"
        )
        parser.add_argument(
            "--url",
            default="",
            help="the address Agentry is opened at, for the links to approvals (default: AGENTRY_PUBLIC_URL, "
            "else http://127.0.0.1:8000 as scripts/dev.sh serves it by default)",
        )

    def handle(self, *args, message, agent, conversation, timeout, end_user, url, attach=(), workspace="", **options):
        self.base_url, self.timeout = url or site_url(), timeout
        self.workspace = workspace_argument(workspace)
        try:
            end_user = end_user_clean(end_user)
        except EndUserInvalid as exc:
            raise CommandError(f"--end-user: {exc}") from None
        try:
            run = self._post(message=message, agent=agent, conversation=conversation, end_user=end_user, paths=attach)
        except AdmissionRefused as exc:
            # The agent's limits per end user hold here as on every other way in.
            raise CommandError(f"{exc.message} Try again in {exc.retry_after} s.") from None
        except AttachmentRefused as exc:
            # A part the agent's models cannot be sent (admission's refusal).
            raise CommandError(f"--attach: {exc}") from None
        self.started = time.monotonic()
        try:
            run = run_tree_wait(run_id=run.pk, timeout=timeout, on_pending=self._report_pending)
        except RunWaitTimeout as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"conversation {run.conversation_id}")
        self.stdout.write(format_run_tree(run))

    def _post(self, *, message, agent, conversation, end_user, paths):
        """The run that answers `message` and carries the files at `paths`: in the conversation
        given, else in a new one, written only if its message is admitted."""
        try:
            per_message_check(len(paths))
        except AttachmentRefused as exc:
            raise CommandError(f"--attach: {exc}") from None
        if conversation:
            conv = self._scoped(Conversation.objects.select_related("agent__workspace").filter(pk=conversation)).first()
            if conv is None:
                raise CommandError(f"No conversation {conversation}{self._where()}.")
            # A conversation's end user is fixed when it starts; an application's end user of the
            # same id is another person, whom the command does not speak for.
            if end_user and not end_user_conversations(person=EndUser(None, end_user)).filter(pk=conv.pk).exists():
                raise CommandError(
                    f"Conversation {conversation} is not with end user {end_user!r} of the platform's own (no owner)."
                )
            attachments = self._stored(paths, agent=conv.agent, owner=conv.owner_id, end_user=conv.end_user)
            return message_submit(
                conversation=conv, content=message, trigger=RunTrigger.CLI, attachments=attachments
            ).run
        found = self._scoped(Agent.objects.select_related("workspace").filter(slug=agent)).first()
        if found is None:
            raise CommandError(f"No agent with slug {agent!r}{self._where()}; run agentry_seed_demo first.")
        attachments = self._stored(paths, agent=found, owner=None, end_user=end_user)
        return conversation_start(
            agent=found,
            user=None,
            content=message,
            title=message[:80],
            end_user=end_user,
            trigger=RunTrigger.CLI,
            workspace_id=self.workspace.pk if self.workspace else None,
            attachments=attachments,
        )

    def _stored(self, paths, *, agent, owner, end_user) -> list:
        """The files stored as attachments of the conversation's identity, in order; a file that
        cannot be read or is refused stops the command, saying why."""
        attachments = []
        for path in map(Path, paths):
            try:
                with path.open("rb") as handle:
                    attachments.append(
                        attachment_store(
                            workspace=agent.workspace,
                            uploaded_by=None,
                            owner=owner,
                            end_user=end_user,
                            data=File(handle, name=path.name),
                            name=path.name,
                        )
                    )
            except OSError as exc:
                raise CommandError(f"--attach {path}: {exc.strerror or exc}") from None
            except AttachmentRefused as exc:
                raise CommandError(f"--attach {path}: {exc}") from None
        return attachments

    def _scoped(self, queryset):
        # With --workspace, that workspace's agents and conversations only (as a member's lists).
        return queryset if self.workspace is None else of_workspace(queryset, self.workspace.pk)

    def _where(self) -> str:
        return f" in workspace {self.workspace.slug!r}" if self.workspace else ""

    def _report_pending(self, approval):
        # Approving, editing or rejecting happens elsewhere (a delegated run's calls too); the
        # command says where, waits and prints the outcome. Flushed: a pipe would hold the lines.
        left = max(0, self.timeout - (time.monotonic() - self.started))
        self.stdout.write("\n".join(approval_waiting_lines(approval, base_url=self.base_url)))
        self.stdout.write(f"    still waiting, up to {left:.0f} s more (--timeout); the run stays parked if this stops")
        self.stdout.flush()
