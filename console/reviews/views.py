"""Review queues for people: the queues of the workspace (open, assigned, done, agreement),
"review next" (one run claimed for the reviewer: reviews.services), the run to review (its
conversation with attachments, its steps, online scores and feedback) with the rubric's form,
and the eval case made of it. Every page asks for reviews.review_run; making a case also asks for
the permissions to add to an eval suite. Another workspace's queue or item is a 404."""

import logging
from functools import wraps

from django.contrib import admin, messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _

from attachments.permissions import VIEW_PERMISSION as VIEW_ATTACHMENT_PERMISSION
from console.monitoring.presenters import timeline_rows
from console.monitoring.timeline import run_timeline_export
from console.reviews.forms import CaseForm, LabelForm
from console.reviews.selectors import run_conversation, run_feedback, run_scores
from conversations.models import Run
from conversations.selectors import agent_config_visible_to
from evals.selectors import run_case_material
from platform_site.http_methods import require_GET, require_POST
from reviews.filling import review_queue_fill
from reviews.models import ReviewItem
from reviews.selectors import (
    items_visible_to,
    queue_agreement,
    queues_agreement,
    queues_visible_to,
    queues_with_counts,
)
from reviews.services import (
    CASE_PERMISSIONS,
    REVIEW_PERMISSION,
    ReviewRefused,
    review_case_make,
    review_label,
    review_next,
    review_release,
)
from workspaces.access import may

log = logging.getLogger(__name__)
RECENT_DONE = 20


def reviewer_required(*permissions: str):
    """Signed in, holding reviews.review_run and every permission named; an anonymous visitor is
    sent to the sign-in page, anyone else refused (403)."""

    def decorate(view):
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            user = request.user
            if not user.is_authenticated:
                return redirect_to_login(request.get_full_path(), reverse("admin:login"))
            if not all(may(user, perm) for perm in (REVIEW_PERMISSION, *permissions)):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def _page(request, template: str, status: int = 200, **context):
    return render(request, template, {**admin.site.each_context(request), **context}, status=status)


def _queue(request, queue_id: int):
    return get_object_or_404(queues_visible_to(user=request.user).filter(enabled=True), pk=queue_id)


def _item(request, item_id: int) -> ReviewItem:
    return get_object_or_404(items_visible_to(user=request.user).select_related("queue"), pk=item_id)


@require_GET
@reviewer_required()
def queue_list(request):
    queues = queues_with_counts(queues_visible_to(user=request.user).filter(enabled=True).select_related("agent"))
    queues = list(queues)
    agreements = queues_agreement(queue_ids=[queue.pk for queue in queues])
    rows = [{"queue": queue, "agreement": agreements[queue.pk]} for queue in queues]
    return _page(request, "reviews/queues.html", title=_("Review queues"), rows=rows)


@require_GET
@reviewer_required()
def queue_page(request, queue_id: int):
    """The queue, filled with the runs that entered since its last fill."""
    queue = _queue(request, queue_id)
    review_queue_fill(queue_id=queue.pk)
    [queue] = queues_with_counts(type(queue).objects.filter(pk=queue.pk))
    done = (
        queue.items.filter(state=ReviewItem.State.DONE)
        .prefetch_related("labels__reviewer")
        .order_by("-pk")[:RECENT_DONE]
    )
    held = queue.items.filter(state=ReviewItem.State.ASSIGNED, assigned_to=request.user).first()
    return _page(
        request,
        "reviews/queue.html",
        title=queue.name,
        queue=queue,
        agreement=queue_agreement(queue=queue),
        done=done,
        held=held,
    )


@require_POST
@reviewer_required()
def queue_next(request, queue_id: int):
    queue = _queue(request, queue_id)
    item = review_next(queue=queue, user=request.user)
    if item is None:
        messages.info(request, _("Nothing left to review in this queue."))
        return redirect("reviews:queue", queue.pk)
    return redirect("reviews:item", item.pk)


def _item_page(request, item: ReviewItem, *, label_form=None, case_form=None, status: int = 200):
    run = Run.objects.filter(pk=item.run_id).select_related("agent", "agent_version").first()
    if run is None:
        raise Http404  # the run was purged by retention since
    export = run_timeline_export(run=run, requests=agent_config_visible_to(user=request.user))
    mine = item.state == ReviewItem.State.ASSIGNED and item.assigned_to_id == request.user.pk
    my_label = item.labels.filter(reviewer=request.user).first()
    may_make_case = all(may(request.user, perm) for perm in CASE_PERMISSIONS)
    if label_form is None and mine:
        label_form = LabelForm(rubric=item.queue.rubric)
    if case_form is None and may_make_case:
        material = run_case_material(run=run)
        answer = my_label.corrected_answer if my_label else ""
        case_form = CaseForm(
            user=request.user,
            initial={
                "name": f"review {item.pk}",
                "corrected_answer": answer,
                "expected_tool_calls": material["expected_tool_calls"] if material else [],
            },
        )
    return _page(
        request,
        "reviews/item.html",
        status=status,
        title=_("Review of run %(id)s") % {"id": run.pk},
        item=item,
        run=run,
        export=export,
        rows=timeline_rows(export["steps"]),
        attachments_readable=request.user.has_perm(VIEW_ATTACHMENT_PERMISSION),
        conversation=run_conversation(run=run),
        scores=run_scores(run=run),
        feedback=run_feedback(run=run),
        mine=mine,
        my_label=my_label,
        label_form=label_form,
        case_form=case_form,
    )


@require_GET
@reviewer_required()
def item_page(request, item_id: int):
    return _item_page(request, _item(request, item_id))


@require_POST
@reviewer_required()
def item_label(request, item_id: int):
    item = _item(request, item_id)
    form = LabelForm(request.POST, rubric=item.queue.rubric)
    if not form.is_valid():
        return _item_page(request, item, label_form=form, status=400)
    try:
        review_label(
            item=item,
            user=request.user,
            verdict=form.cleaned_data["verdict"],
            labels=form.labels(),
            corrected_answer=form.cleaned_data["corrected_answer"],
            notes=form.cleaned_data["notes"],
        )
    except ValidationError as exc:
        form.add_error(None, exc.messages)
        return _item_page(request, item, label_form=form, status=400)
    except ReviewRefused as exc:
        messages.error(request, str(exc))
        return redirect("reviews:queue", item.queue_id)
    messages.success(request, _("Review saved."))
    if request.POST.get("then") == "next":
        return queue_next(request, item.queue_id)
    return redirect("reviews:item", item.pk)


@require_POST
@reviewer_required()
def item_release(request, item_id: int):
    item = _item(request, item_id)
    review_release(item=item, user=request.user)
    return redirect("reviews:queue", item.queue_id)


@require_POST
@reviewer_required(*CASE_PERMISSIONS)
def item_case(request, item_id: int):
    """The reviewed run as a new case of a suite, its corrected answer the expectation."""
    item = _item(request, item_id)
    form = CaseForm(request.POST, user=request.user)
    if form.is_valid():
        try:
            case = review_case_make(
                item=item,
                suite=form.cleaned_data["suite"],
                name=form.cleaned_data["name"],
                corrected_answer=form.cleaned_data["corrected_answer"],
                check=form.cleaned_data["check"],
                expected_tool_calls=form.cleaned_data["expected_tool_calls"],
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            log.info("review item %s made case %s of suite %s by %s", item.pk, case.pk, case.suite_id, request.user.pk)
            messages.success(
                request, _("Case %(name)s added to suite %(suite)s.") % {"name": case.name, "suite": case.suite}
            )
            return redirect("reviews:item", item.pk)
    return _item_page(request, item, case_form=form, status=400)
