"""The approval queue: pending approvals to decide, a history of decided ones, and a small
JSON endpoint the queue polls so new approvals appear without a reload."""

from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _

from agents.snapshot import snapshot_parse, snapshot_tool
from console.approvals.cards import approval_cards
from console.approvals.diff import arguments_diff
from conversations.approvals.selectors import approval_filter_choices, approvals_filter, approvals_visible_to
from conversations.models import Approval
from conversations.permissions import user_may_decide
from engine.approvals import APPROVE, ApprovalConflict, ApprovalInvalid, ApprovalNotAllowed, approval_decide
from platform_site.http_methods import require_GET, require_POST
from platform_site.json_input import JSONInputError, json_loads_checked
from tools.arguments import validate_arguments

HISTORY_PAGE_SIZE = 25


def approver_required(view):
    @login_required(login_url="approvals:login")
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not user_may_decide(request.user):
            return HttpResponseForbidden(render_to_string("approvals/forbidden.html", request=request))
        return view(request, *args, **kwargs)

    return wrapper


def _filters(request) -> dict:
    return {"agent": request.GET.get("agent", ""), "tool": request.GET.get("tool", "")}


def _pending(request, filters: dict):
    queryset = approvals_visible_to(user=request.user)
    return approvals_filter(queryset=queryset, status=Approval.Status.PENDING, **filters).order_by("created_at")


def _queue(request, *, edit: dict | None = None, status: int = 200):
    filters = _filters(request)
    cards = approval_cards(approvals=_pending(request, filters))
    for card in cards:
        if edit and card.approval.pk == edit["id"]:
            card.edit_text, card.edit_errors = edit["text"], edit["errors"]
    choices = approval_filter_choices(
        queryset=approvals_visible_to(user=request.user).filter(status=Approval.Status.PENDING)
    )
    return render(
        request,
        "approvals/queue.html",
        {
            "cards": cards,
            "filters": filters,
            "choices": choices,
            "poll_seconds": settings.AGENTRY_APPROVALS_POLL_SECONDS,
        },
        status=status,
    )


@require_GET
@approver_required
def approval_queue(request):
    return _queue(request)


@require_GET
@approver_required
def approval_poll(request):
    cards = approval_cards(approvals=_pending(request, _filters(request)))
    # The cards' forms must come back to the queue, not to this endpoint.
    back = reverse("approvals:queue") + (f"?{request.GET.urlencode()}" if request.GET else "")
    return JsonResponse(
        {
            "count": len(cards),
            "cards": [
                {
                    "id": card.approval.pk,
                    "html": render_to_string("approvals/_card.html", {"card": card, "back": back}, request=request),
                }
                for card in cards
            ],
        }
    )


def _back(request) -> str:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return reverse("approvals:queue")


@require_POST
@approver_required
def approval_decision(request, pk: int):
    approval = get_object_or_404(approvals_visible_to(user=request.user), pk=pk)
    text = request.POST.get("arguments")
    arguments = None
    if text is not None:
        try:
            arguments = json_loads_checked(text)
        except JSONInputError as exc:
            return _queue(request, edit={"id": pk, "text": text, "errors": [str(exc)]}, status=400)
    decision = request.POST.get("decision", "")
    try:
        approval_decide(
            approval_id=approval.pk,
            user=request.user,
            decision=decision,
            channel=Approval.Channel.PAGE,
            arguments=arguments,
            reason=request.POST.get("reason", ""),
            for_rest_of_run=request.POST.get("for_rest_of_run") == "on",
            expected_hash=request.POST.get("arguments_hash", ""),
        )
    except ApprovalInvalid as exc:
        # A hand-off's card shows the answer typed so far again; a tool call's, its arguments.
        kept = request.POST.get("reason", "") if approval.kind == Approval.Kind.HANDOFF else text or ""
        return _queue(request, edit={"id": pk, "text": kept, "errors": exc.errors}, status=400)
    except (ApprovalConflict, ApprovalNotAllowed) as exc:
        messages.error(request, f"#{pk} {approval.invocation.tool_name}: {exc}")
        return redirect(_back(request))
    if approval.kind == Approval.Kind.HANDOFF:
        done = _("Answered #%(id)s %(tool)s.") if decision == APPROVE else _("Nobody answered #%(id)s %(tool)s.")
    elif decision != APPROVE:
        done = _("Rejected #%(id)s %(tool)s.")
    elif arguments is not None and approval.arguments != arguments:
        done = _("Approved #%(id)s %(tool)s with your edits.")
    else:
        done = _("Approved #%(id)s %(tool)s.")
    messages.success(request, done % {"id": pk, "tool": approval.invocation.tool_name})
    return redirect(_back(request))


@require_POST
@approver_required
def approval_preview(request, pk: int):
    """Check edited arguments as they are typed: JSON errors, schema errors and the difference."""
    approval = get_object_or_404(approvals_visible_to(user=request.user).select_related("run__agent_version"), pk=pk)
    try:
        edited = json_loads_checked(request.body or b"null")
    except JSONInputError as exc:
        # In the error shape, and with the fields the page shows as the person types.
        return JsonResponse(
            {"message": str(exc), "extra": {}, "ok": False, "errors": [str(exc)], "diff": []}, status=400
        )
    if not isinstance(edited, dict):
        return JsonResponse({"ok": False, "errors": ["The arguments must be a JSON object."], "diff": []})
    spec = snapshot_tool(snapshot_parse(approval.run.agent_version.snapshot), approval.invocation.tool_name)
    errors = validate_arguments(spec["parameters"], edited) if spec else [_("The tool is no longer available.")]
    return JsonResponse(
        {"ok": not errors, "errors": errors, "diff": arguments_diff(approval.invocation.arguments or {}, edited)}
    )


@require_GET
@approver_required
def approval_history(request):
    filters = {**_filters(request), "status": request.GET.get("status", "")}
    if filters["status"] not in Approval.Status.values or filters["status"] == Approval.Status.PENDING:
        filters["status"] = "decided"
    queryset = approvals_filter(queryset=approvals_visible_to(user=request.user), **filters)
    page = Paginator(queryset.order_by("-decided_at", "-pk"), HISTORY_PAGE_SIZE).get_page(request.GET.get("page"))
    choices = approval_filter_choices(queryset=approvals_visible_to(user=request.user))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "approvals/history.html",
        {
            "cards": approval_cards(approvals=page.object_list),
            "page": page,
            "filters": filters,
            "choices": choices,
            "statuses": [(s, label) for s, label in Approval.Status.choices if s != Approval.Status.PENDING],
            "query": query.urlencode(),
        },
    )


@require_GET
@approver_required
def approval_detail(request, pk: int):
    approval = get_object_or_404(approvals_visible_to(user=request.user), pk=pk)
    [card] = approval_cards(approvals=[approval])
    events = approval.run.events.filter(type__startswith="approval.").order_by("seq")
    events = [e for e in events if e.payload.get("approval_id") == approval.pk]
    return render(request, "approvals/detail.html", {"card": card, "events": events})
