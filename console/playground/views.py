"""The prompt playground of an agent (/monitor/agents/<slug>/playground/): the page, and its three
JSON posts (send a test message to the draft and the live version, save the draft, run an eval
suite on it). Thin: console.playground.services and agents.playground do the work.

Seeing the page and sending take what the try page takes plus viewing the agent; saving and
evaluating take changing it. An agent of another workspace, or one the user may not use, is a
404 as if there were none."""

import logging

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext as _

from agents.models import Agent
from agents.playground import AGENT_FIELDS, MODEL_FIELDS, playground_save
from agents.run_choices import RunChoiceRefused
from agents.selectors import agents_usable_by
from console.monitoring.views import TRY_PERMISSIONS, operator_required
from console.playground.forms import EvalForm, PlaygroundForm, SendForm
from console.playground.services import PastRunInvalid, live_version, past_runs, playground_eval, playground_send
from conversations.models import Message, Run
from engine.admission_limits import AdmissionRefused
from evals.services import EvalNotAllowed
from platform_site.http_methods import require_GET, require_POST
from workspaces.access import in_workspace

log = logging.getLogger(__name__)

VIEW_PERMISSIONS = (*TRY_PERMISSIONS, "agents.view_agent")
CHANGE_PERMISSION = "agents.change_agent"
PAST_RUN_EXCERPT_CHARS = 80


def _agent(request, slug) -> Agent:
    agents = in_workspace(agents_usable_by(user=request.user), request.user)
    return get_object_or_404(agents.select_related("model_config", "published_version"), slug=slug)


def _error(message: str, status: int = 400, extra: dict | None = None) -> JsonResponse:
    return JsonResponse({"message": message, "extra": extra or {}}, status=status)


def _first_error(form, errors: dict) -> JsonResponse:
    """The first problem, named by the form's label of its field (none for the whole form's)."""
    field, messages = next(iter(errors.items()))
    label = form.fields[field].label if field in form.fields else ""
    text = " ".join(messages)
    return _error(f"{label}: {text}" if label else text, extra=errors)


def _form_error(form) -> JsonResponse:
    return _first_error(form, form.errors)


def _validation_error(exc: ValidationError, form) -> JsonResponse:
    """A model's validation error (agents.playground runs the models' own checks)."""
    if hasattr(exc, "error_dict"):
        return _first_error(form, exc.message_dict)
    return _error(" ".join(exc.messages))


def _past_runs(agent: Agent) -> list[dict]:
    """The recent production runs to send again, each with its user message's start (one read)."""
    runs = list(past_runs(agent=agent))
    firsts = {}
    for run_id, content in (
        Message.objects.filter(run_id__in=[run.pk for run in runs], role=Message.Role.USER)
        .order_by("-order")
        .values_list("run_id", "content")
    ):
        firsts[run_id] = content
    return [
        {
            "run": run,
            "excerpt": firsts[run.pk][:PAST_RUN_EXCERPT_CHARS],
            "cut": len(firsts[run.pk]) > PAST_RUN_EXCERPT_CHARS,
        }
        for run in runs
        if run.pk in firsts
    ]


@require_GET
@operator_required(*VIEW_PERMISSIONS)
def playground_page(request, slug):
    agent = _agent(request, slug)
    form = SendForm(initial=PlaygroundForm.initial_for(agent), agent=agent)
    live = live_version(agent=agent)
    return render(
        request,
        "monitoring/playground.html",
        {
            **admin.site.each_context(request),
            "title": _("Prompt playground: %(agent)s") % {"agent": agent.name},
            "agent": agent,
            "form": form,
            "eval_form": EvalForm(agent=agent),
            "past_runs": _past_runs(agent),
            "live": live,
            "may_change": request.user.has_perm(CHANGE_PERMISSION),
            "param_fields": [form[name] for name in (*AGENT_FIELDS, *MODEL_FIELDS) if name != "system_prompt"],
        },
    )


def _side(run: Run, label: str) -> dict:
    return {
        "run_id": str(run.pk),
        "version": label,
        "events_url": reverse("monitoring:run-events", args=[run.pk]),
        "timeline_url": reverse("monitoring:run", args=[run.pk]),
    }


@require_POST
@operator_required(*VIEW_PERMISSIONS, json=True)
def playground_send_view(request, slug):
    agent = _agent(request, slug)
    form = SendForm(request.POST, agent=agent)
    if not form.is_valid():
        return _form_error(form)
    try:
        pair = playground_send(
            agent=agent,
            user=request.user,
            edits=form.edits(),
            content=form.cleaned_data["content"],
            source=form.cleaned_data["past_run"],
        )
    except ValidationError as exc:
        return _validation_error(exc, form)
    except PastRunInvalid as exc:
        return _error(str(exc))
    except RunChoiceRefused as exc:
        return _error(str(exc), status=403)
    except AdmissionRefused as exc:
        response = _error(exc.message, status=429)
        response["Retry-After"] = str(exc.retry_after)
        return response
    log.info("playground runs %s and %s queued by %s", pair.draft.pk, pair.live.pk, request.user.get_username())
    live = pair.live.agent_version
    live_label = (
        _("live: version %(number)s") % {"number": live.number}
        if live.pk == agent.published_version_id
        else _("live: the saved draft (version %(number)s, never published)") % {"number": live.number}
    )
    return JsonResponse(
        {
            "content": pair.content,
            "draft": _side(pair.draft, _("edited draft (playground version)")),
            "live": _side(pair.live, live_label),
        },
        status=201,
    )


@require_POST
@operator_required(*VIEW_PERMISSIONS, CHANGE_PERMISSION, json=True)
def playground_save_view(request, slug):
    agent = _agent(request, slug)
    form = PlaygroundForm(request.POST, agent=agent)
    if not form.is_valid():
        return _form_error(form)
    edits = form.edits()
    try:
        playground_save(agent=agent, edits=edits)
    except ValidationError as exc:
        return _validation_error(exc, form)
    log.info("agent %s saved from the playground by %s", agent.slug, request.user.get_username())
    kept = sorted(edits.model_params)
    message = _("Saved as the agent's draft. Publish it from its versions page when it is ready.")
    if kept:
        message += " " + _(
            "The model's parameters (%(names)s) belong to the model config, shared by other agents: "
            "change them on the model config."
        ) % {"names": ", ".join(kept)}
    return JsonResponse(
        {
            "message": message,
            "not_saved": kept,
            "versions_url": reverse("admin:agents_agent_versions", args=[agent.pk]),
        }
    )


@require_POST
@operator_required(*VIEW_PERMISSIONS, CHANGE_PERMISSION, json=True)
def playground_eval_view(request, slug):
    agent = _agent(request, slug)
    form = EvalForm(request.POST, agent=agent)
    if not form.is_valid():
        return _form_error(form)
    try:
        eval_run = playground_eval(agent=agent, user=request.user, edits=form.edits(), suite=form.cleaned_data["suite"])
    except ValidationError as exc:
        return _validation_error(exc, form)
    except EvalNotAllowed as exc:
        return _error(str(exc), status=403)
    log.info("eval run %s of the playground draft of %s started by %s", eval_run.pk, agent.slug, request.user)
    return JsonResponse(
        {"eval_run_id": eval_run.pk, "url": reverse("admin:evals_evalrun_change", args=[eval_run.pk])}, status=201
    )
