"""Staff pages: the monitoring dashboard (with its HTML panel and JSON data endpoints), a run's
timeline, the operator actions, forks (made from a step of the timeline, compared with their
source), and the try-an-agent page. Thin: selectors and services do the work. Each page asks for
the permission that matches its power: seeing runs (view_run), acting on them (operate_run),
forking them (fork_run), or starting them (add_run) - being staff is not enough."""

import logging
from functools import wraps

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpResponseBadRequest, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _

from agents.models import Agent
from agents.release_admin import ReleaseForm
from agents.releases import PUBLISH_PERMISSION, ReleaseRefused, UnknownVersion, release_apply
from alerts.permissions import VIEW_FIRINGS_PERMISSION
from attachments.parts import part_of
from attachments.permissions import VIEW_PERMISSION as VIEW_ATTACHMENT_PERMISSION
from attachments.sniff import AttachmentRefused
from console.agent_hub import agent_for_hub, agent_hub
from console.monitoring.event_lines import event_lines
from console.monitoring.fork_comparison import fork_comparison
from console.monitoring.fork_forms import ForkForm, fork_choices, fork_forms, step_tool_calls
from console.monitoring.forms import EvalCaseFromRunForm, TryAgentForm, TryAttachmentForm
from console.monitoring.presenters import dashboard_context, fork_context, run_outcome, timeline_rows
from console.monitoring.selectors import alerts_open, dashboard_snapshot, run_events_after
from console.monitoring.services import ConversationNotFound, try_attachment_store, try_message_post
from console.monitoring.thread import conversation_thread
from console.monitoring.timeline import run_timeline_export
from console.monitoring.waterfall import run_waterfall
from console.online_scores import online_page
from conversations.models import TERMINAL_STATUSES, Conversation, Run
from conversations.permissions import FORK_PERMISSION, user_may_decide
from conversations.selectors import agent_config_visible_to
from engine.admission import ConversationBusy
from engine.admission_limits import AdmissionRefused
from engine.forks import ForkInvalid, ForkNotAllowed, run_fork
from engine.operations import (
    OPERATE_PERMISSION,
    RunActionRefused,
    run_cancel_by_operator,
    run_requeue,
    run_retry,
)
from evals.services import eval_case_from_run
from platform_site.http_methods import require_GET, require_POST
from platform_site.logs import bind
from workspaces.access import in_workspace

log = logging.getLogger(__name__)

ACTIONS = {"cancel": run_cancel_by_operator, "requeue": run_requeue, "retry": run_retry}
VIEW_PERMISSION = "conversations.view_run"
ONLINE_SCORES_PERMISSION = "evals.view_onlinescore"
# The try page starts runs, and follows them on the run's timeline and events.
TRY_PERMISSIONS = ("conversations.add_run", VIEW_PERMISSION)
ADD_EVAL_CASE_PERMISSION = "evals.add_evalcase"
# A conversation's thread is paged by runs; past this page a request is refused, not an OFFSET
# scan over a runaway conversation.
THREAD_PAGES_MAX = 10_000


class BadParameter(ValueError):
    pass


def _int_param(request, name: str, default: int, low: int, high: int) -> int:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise BadParameter(f"{name} must be a whole number from {low} to {high}.")
    return value


def _window(request) -> tuple[int, int]:
    return _int_param(request, "hours", 24, 1, 168), _int_param(request, "days", 7, 1, 31)


def _json_error(message: str, status: int = 400) -> JsonResponse:
    return JsonResponse({"message": message, "extra": {}}, status=status)


def operator_required(*permissions: str, json: bool = False):
    """Active staff holding every permission named. An anonymous visitor is sent to the login
    page; anyone else is refused with 403 (in the API's error shape for JSON endpoints)."""

    def decorate(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            user = request.user
            if not user.is_authenticated:
                return redirect_to_login(request.get_full_path(), reverse("admin:login"))
            if not (user.is_active and user.is_staff and user.has_perms(permissions)):
                if json:
                    return _json_error(_("You do not have permission to do this."), status=403)
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def _snapshot(request, *, hours: int, days: int) -> dict:
    """The dashboard's data, headed by the open alert firings for those who may see them."""
    snapshot = dashboard_snapshot(user=request.user, hours=hours, days=days)
    snapshot["alerts"] = alerts_open(user=request.user) if request.user.has_perm(VIEW_FIRINGS_PERMISSION) else None
    return snapshot


def _page(request, template: str, **context):
    return render(request, template, {**admin.site.each_context(request), **context})


@require_GET
@operator_required(VIEW_PERMISSION)
def dashboard(request):
    try:
        hours, days = _window(request)
    except BadParameter as exc:
        return HttpResponseBadRequest(str(exc))
    snapshot = _snapshot(request, hours=hours, days=days)
    return _page(request, "monitoring/dashboard.html", title=_("Monitoring"), **dashboard_context(snapshot))


@require_GET
@operator_required(VIEW_PERMISSION)
def dashboard_panel(request):
    """The dashboard's body alone; the page swaps it in every few seconds."""
    try:
        hours, days = _window(request)
    except BadParameter as exc:
        return HttpResponseBadRequest(str(exc))
    snapshot = _snapshot(request, hours=hours, days=days)
    return render(request, "monitoring/_panel.html", dashboard_context(snapshot))


@require_GET
@operator_required(VIEW_PERMISSION, json=True)
def dashboard_data(request):
    try:
        hours, days = _window(request)
    except BadParameter as exc:
        return _json_error(str(exc))
    return JsonResponse(_snapshot(request, hours=hours, days=days), encoder=DjangoJSONEncoder)


def _hub_agent(request, slug) -> Agent:
    # An agent of another workspace is a 404, as if there were none.
    return get_object_or_404(agent_for_hub(in_workspace(Agent.objects.all(), request.user)), slug=slug)


def _hub_page(request, agent: Agent, *, release_form=None, status: int = 200):
    return render(
        request,
        "monitoring/agent_hub.html",
        {
            **admin.site.each_context(request),
            "title": agent.name,
            "agent": agent,
            "release_form": release_form or ReleaseForm(),
            **agent_hub(agent=agent, request=request),
        },
        status=status,
    )


@require_GET
@operator_required(VIEW_PERMISSION)
def agent_page(request, slug):
    """An agent's page (the hub)."""
    return _hub_page(request, _hub_agent(request, slug))


@require_GET
@operator_required(VIEW_PERMISSION, ONLINE_SCORES_PERMISSION)
def agent_online_page(request, slug):
    """An agent's online scores: each evaluator's daily average per version, the latest scores."""
    agent = _hub_agent(request, slug)
    page = online_page(agent=agent)
    # Thumbnails and links to the downloads for those who may download, as on a run's timeline.
    readable = page["attachments_shown"] and request.user.has_perm(VIEW_ATTACHMENT_PERMISSION)
    context = {**admin.site.each_context(request), "title": agent.name, "agent": agent, **page}
    return render(request, "monitoring/agent_online.html", {**context, "attachments_readable": readable})


@require_POST
@operator_required(VIEW_PERMISSION, PUBLISH_PERMISSION)
def agent_release(request, slug):
    """A release action from the agent's page: the services and the permission of the admin's
    versions page (agents.release_admin); a refusal (a release check, a canary running) is
    said on the page, not raised."""
    agent = _hub_agent(request, slug)
    form = ReleaseForm(request.POST)
    if not form.is_valid():
        return _hub_page(request, agent, release_form=form, status=400)
    try:
        release = release_apply(agent=agent, user=request.user, **form.cleaned_data)
    except (ReleaseRefused, UnknownVersion) as exc:
        messages.error(request, str(exc))
    else:
        done = {"action": release.get_action_display(), "number": release.version.number}
        messages.success(request, _("%(action)s: version %(number)s.") % done)
    return redirect(reverse("monitoring:agent", args=[agent.slug]) + "#hub-versions")


@require_GET
@operator_required(VIEW_PERMISSION)
def conversation_thread_page(request, conversation_id):
    """Every run of a conversation as one chat (another workspace's conversation is a 404)."""
    conversation = get_object_or_404(
        in_workspace(Conversation.objects.select_related("agent"), request.user), pk=conversation_id
    )
    try:
        page = _int_param(request, "page", 1, 1, THREAD_PAGES_MAX)
    except BadParameter as exc:
        return HttpResponseBadRequest(str(exc))
    return _page(
        request,
        "monitoring/conversation_thread.html",
        title=_("Conversation %(id)s") % {"id": conversation.pk},
        conversation=conversation,
        **conversation_thread(conversation=conversation, page=page),
    )


def _run(request, run_id) -> Run:
    """The run, if it is of the workspace the user acts in (else 404, as if there were none)."""
    return get_object_or_404(
        in_workspace(Run.objects.select_related("agent", "agent_version"), request.user), pk=run_id
    )


def _with_fork_forms(request, run: Run, export: dict, rows: list[dict], bound: ForkForm | None) -> None:
    """A "Fork from here" form on each step's model call row, for those who may fork a run that
    has ended."""
    forms = {}
    if request.user.has_perm(FORK_PERMISSION) and run.status in TERMINAL_STATUSES:
        forms = fork_forms(steps=export["steps"], choices=fork_choices(run=run), bound=bound)
    for row in rows:
        row["fork_form"] = forms.get(row["step"]["id"]) if row["step"]["kind"] == "llm_call" else None


def _timeline_page(request, run: Run, *, case_form=None, fork_form=None, status: int = 200):
    export = run_timeline_export(run=run, requests=agent_config_visible_to(user=request.user))
    if case_form is None and request.user.has_perm(ADD_EVAL_CASE_PERMISSION):
        case_form = EvalCaseFromRunForm(user=request.user)
    rows = timeline_rows(export["steps"])
    _with_fork_forms(request, run, export, rows, fork_form)
    # Thumbnails and links to the downloads for those who may download (console.monitoring.attachments).
    shown = export["run"]["question_parts"] or export["part_texts"]
    readable = bool(shown) and request.user.has_perm(VIEW_ATTACHMENT_PERMISSION)
    # Each pre-step's call by its number in the steps' table.
    numbers = {row["step"]["id"]: row["number"] for row in rows if row["step"]["kind"] == "llm_call"}
    part_texts = [{**text, "step": numbers.get(text["llm_call_id"])} for text in export["part_texts"]]
    response = _page(
        request,
        "monitoring/run_timeline.html",
        title=_("Run %(id)s") % {"id": run.pk},
        run=run,
        export=export,
        outcome=run_outcome(export["run"]),
        waterfall=run_waterfall(
            export=export, now=timezone.now(), run_url=lambda run_id: reverse("monitoring:run", args=[run_id])
        ),
        rows=rows,
        attachments_readable=readable,
        part_texts=part_texts,
        events=event_lines(export=export),
        case_form=case_form,
        # A refused fork: its errors head the page too (its step may have no form to show them).
        fork_error_form=fork_form if fork_form is not None and fork_form.errors else None,
        **fork_context(export["run"]),
    )
    response.status_code = status
    return response


@require_GET
@operator_required(VIEW_PERMISSION)
def run_timeline_page(request, run_id):
    return _timeline_page(request, _run(request, run_id))


@require_POST
@operator_required(VIEW_PERMISSION, ADD_EVAL_CASE_PERMISSION)
def run_eval_case(request, run_id):
    """The run as a new case of an eval suite; the operator then fills in its expectations on the
    case's admin page. A bad choice shows the timeline again with the form's errors."""
    run = _run(request, run_id)
    form = EvalCaseFromRunForm(request.POST, user=request.user)
    if form.is_valid():
        try:
            case = eval_case_from_run(run=run, suite=form.cleaned_data["suite"], name=form.cleaned_data["name"])
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            log.info(
                "run %s made case %s of suite %s by %s", run.pk, case.pk, case.suite_id, request.user.get_username()
            )
            messages.success(
                request, _("Case %(name)s added to suite %(suite)s.") % {"name": case.name, "suite": case.suite}
            )
            return redirect("admin:evals_evalcase_change", case.pk)
    return _timeline_page(request, run, case_form=form, status=400)


@require_POST
@operator_required(VIEW_PERMISSION, FORK_PERMISSION)
def run_fork_post(request, run_id, step):
    """A fork of the run from `step`, with the change the step's form asks for; then the fork
    beside its source. What cannot be forked shows the timeline again with the reason (400)."""
    run = _run(request, run_id)
    form = ForkForm(
        request.POST, step=step, choices=fork_choices(run=run), tool_calls=step_tool_calls(run=run, step=step)
    )
    if form.is_valid():
        try:
            fork = run_fork(source=run, request=form.fork_request(), user=request.user)
        except ForkNotAllowed as exc:
            # The timeline again, the reason (which permission it takes) heading it.
            form.add_error(None, str(exc))
            return _timeline_page(request, run, fork_form=form, status=403)
        except ForkInvalid as exc:
            form.add_error(None, str(exc))
        else:
            log.info(
                "run %s forked from run %s at step %s (%s) by %s",
                fork.pk,
                run.pk,
                step,
                form.cleaned_data["change"],
                request.user.get_username(),
            )
            messages.success(request, _("Fork queued from step %(step)s.") % {"step": step})
            return redirect("monitoring:run-compare", fork.pk)
    return _timeline_page(request, run, fork_form=form, status=400)


@require_GET
@operator_required(VIEW_PERMISSION)
def run_compare(request, run_id):
    """A fork beside its source from the fork step on, with the differences marked."""
    fork = _run(request, run_id)
    if fork.forked_from_id is None:
        raise Http404("this run is not a fork, or its source was deleted")
    try:
        comparison = fork_comparison(fork)
    except Run.DoesNotExist:
        raise Http404("the fork's source was deleted") from None
    return _page(
        request,
        "monitoring/run_compare.html",
        title=_("Fork %(id)s beside its source") % {"id": fork.pk},
        run=fork,
        comparison=comparison,
    )


@require_GET
@operator_required(VIEW_PERMISSION, json=True)
def run_timeline_json(request, run_id):
    return JsonResponse(
        run_timeline_export(run=_run(request, run_id), requests=agent_config_visible_to(user=request.user)),
        encoder=DjangoJSONEncoder,
        json_dumps_params={"ensure_ascii": False, "indent": 2},
    )


@require_GET
@operator_required(VIEW_PERMISSION, json=True)
def run_events_json(request, run_id):
    try:
        after = _int_param(request, "after", 0, 0, 2**31 - 1)
    except BadParameter as exc:
        return _json_error(str(exc))
    run = get_object_or_404(in_workspace(Run.objects.all(), request.user), pk=run_id)
    data = run_events_after(run=run, after=after)
    # A link to each approval the run waits for, for those who may decide it.
    may_decide = user_may_decide(request.user)
    for approval in data["pending_approvals"]:
        approval["url"] = reverse("approvals:detail", args=[approval["id"]]) if may_decide else None
    for call in data["tool_calls"]:
        if call["approval"]:
            call["approval"]["url"] = reverse("approvals:detail", args=[call["approval"]["id"]]) if may_decide else None
    return JsonResponse(data, encoder=DjangoJSONEncoder, json_dumps_params={"ensure_ascii": False})


@require_POST
@operator_required(OPERATE_PERMISSION)
def run_action(request, run_id, action):
    if action not in ACTIONS:
        raise Http404("no such action")
    # Another workspace's run is not found, before anything is done to it.
    get_object_or_404(in_workspace(Run.objects.all(), request.user), pk=run_id)
    try:
        ACTIONS[action](run_id=run_id, user=request.user)
    except Run.DoesNotExist:
        raise Http404("no such run")
    except RunActionRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("Run %(run)s: %(action)s done.") % {"run": run_id, "action": action})
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("monitoring:run", args=[run_id])
    return redirect(target)


@require_GET
@operator_required(*TRY_PERMISSIONS)
def try_agent(request):
    form = TryAgentForm(initial={"agent": request.GET.get("agent")}, user=request.user)
    limits = {
        "max_bytes": settings.AGENTRY_ATTACHMENT_MAX_BYTES,
        "per_message": settings.AGENTRY_ATTACHMENTS_PER_MESSAGE,
    }
    return _page(request, "monitoring/try_agent.html", title=_("Try an agent"), form=form, limits=limits)


def _form_error(form) -> JsonResponse:
    field, errors = next(iter(form.errors.items()))
    return JsonResponse({"message": f"{field}: {' '.join(errors)}", "extra": form.errors}, status=400)


@require_POST
@operator_required(*TRY_PERMISSIONS, json=True)
def try_agent_attach(request):
    """One file for the next message (multipart: agent, end_user, file): its id and part."""
    if len(request.FILES) != 1 or len(request.FILES.getlist("file")) != 1:
        return _json_error(_("Send exactly one file, in the field `file`."))
    form = TryAttachmentForm(request.POST, request.FILES, user=request.user)
    if not form.is_valid() and form.has_error("agent", "invalid_choice"):
        return _json_error(_("No such agent."), status=404)
    if not form.is_valid():
        return _form_error(form)
    try:
        attachment = try_attachment_store(
            agent=form.cleaned_data["agent"],
            user=request.user,
            end_user=form.cleaned_data["end_user"],
            upload=form.cleaned_data["file"],
        )
    except AttachmentRefused as exc:
        return _json_error(str(exc), status=413 if exc.code == "size" else 400)
    return JsonResponse({"id": str(attachment.pk), **part_of(attachment)}, status=201)


@require_POST
@operator_required(*TRY_PERMISSIONS, json=True)
def try_agent_send(request):
    form = TryAgentForm(request.POST, user=request.user)
    if not form.is_valid() and form.has_error("agent", "invalid_choice"):
        # An agent the user may not talk to (another workspace's, a group's): not found.
        return _json_error(_("No such agent."), status=404)
    if not form.is_valid():
        return _form_error(form)
    try:
        run = try_message_post(
            agent=form.cleaned_data["agent"],
            user=request.user,
            content=form.cleaned_data["content"],
            conversation_id=form.cleaned_data["conversation"],
            version=form.cleaned_data["version"],
            end_user=form.cleaned_data["end_user"],
            attachment_ids=form.cleaned_data["attachments"],
        )
    except (ConversationNotFound, UnknownVersion, AttachmentRefused) as exc:
        return _json_error(str(exc))
    except AdmissionRefused as exc:
        # Speaking as an end user, the page is one more way in: the agent's limits per end user hold.
        response = _json_error(exc.message, status=429)
        response["Retry-After"] = str(exc.retry_after)
        return response
    except ConversationBusy as exc:
        return JsonResponse(
            {
                "message": _("This agent answers one message at a time: %(reason)s. Wait for it to end.")
                % {"reason": exc},
                "extra": {"active_run": str(exc.run.pk)},
            },
            status=409,
        )
    bind(run_id=run.pk)
    log.info("run %s queued from the try-an-agent page by %s", run.pk, request.user.get_username())
    return JsonResponse(
        {
            "run_id": str(run.pk),
            "conversation_id": str(run.conversation_id),
            "events_url": reverse("monitoring:run-events", args=[run.pk]),
            "timeline_url": reverse("monitoring:run", args=[run.pk]),
        },
        status=201,
    )
