"""The executor of kind "knowledge": a base's search tool, registered in tools at app ready.

`load` finds the base on the caller's thread. `run` searches on the tool pool's thread, unlike
the other executors it reads and writes the database there (the chunks, the embedding call of
the query, the KnowledgeSearch ledger row), so it closes that thread's connection when done.
When nothing is found and the base hands off, it raises HandOff: the engine parks the call as a
hand-off approval a person answers (engine.tool_step).
"""

from django.db import connection
from django.utils.translation import gettext as _

from conversations.models import Run
from knowledge.embeddings import EmbeddingFailed
from knowledge.models import KnowledgeBase
from knowledge.retrieval import search
from knowledge.services import knowledge_search_record
from tools.executors.live import live_check, live_tool
from tools.registry import HandOff, ToolContext, ToolError


def load(spec: dict, live: dict | None = None) -> int:
    if live is None:
        live_tool(spec)
    else:
        live_check(live["is_active"])
    base_id = KnowledgeBase.objects.filter(search_tool_id=spec.get("id")).values_list("pk", flat=True).first()
    if base_id is None:
        raise ToolError(_("its knowledge base no longer exists."))
    return base_id


def _no_answer(base: KnowledgeBase) -> str:
    if base.fallback_answer.strip():
        return _(
            "No passage in the knowledge base answers this. Do not answer from your own knowledge: reply to the "
            "user with exactly this text and nothing else:\n%(fallback)s"
        ) % {"fallback": base.fallback_answer.strip()}
    return _("No passage in the knowledge base answers this. Tell the user you could not find the answer.")


def _unanswered(base: KnowledgeBase) -> str:
    return _("No person answered this question.") + " " + _no_answer(base)


def _render(passages) -> str:
    blocks = [
        f"[C{p.chunk.pk}] {p.chunk.document.title}{f', {p.location}' if p.location else ''} (score {p.score:.4f})\n"
        f"{p.chunk.text}"
        for p in passages
    ]
    return (
        _("Passages (cite the ids you use, like [C%(id)s]):") % {"id": passages[0].chunk.pk}
        + "\n\n"
        + "\n\n".join(blocks)
    )


def run(*, spec: dict, arguments: dict, ctx: ToolContext, loaded: int) -> str:
    try:
        base = KnowledgeBase.objects.select_related("embedding_model").get(pk=loaded)
        run_row = Run.objects.get(pk=ctx.run_id)
        top_k = int(arguments.get("top_k", 3))
        filters = {key: arguments[key] for key in ("document_ids", "tags") if arguments.get(key)}
        try:
            passages = search(
                base=base,
                query=arguments["query"],
                top_k=top_k,
                document_ids=filters.get("document_ids"),
                tags=filters.get("tags"),
                run=run_row,
            )
        except EmbeddingFailed as exc:
            raise ToolError(_("the search is not available right now; try again later."), detail=str(exc)) from exc
        # An evaluation's run never waits for a person: it gets the fallback.
        handoff = (
            not passages and base.on_nothing_found == KnowledgeBase.OnNothingFound.HANDOFF and run_row.sandbox is None
        )
        knowledge_search_record(
            base=base,
            run=run_row,
            tool_call_id=ctx.tool_call_id,
            query=arguments["query"],
            top_k=top_k,
            filters=filters,
            passages=passages,
            handed_off=handoff,
        )
        if handoff:
            # The engine parks the call as a hand-off in the approval queue (engine.tool_step).
            question = _("Nothing in knowledge base %(base)s scored above the threshold for: %(query)s") % {
                "base": base.name,
                "query": arguments["query"],
            }
            raise HandOff(question, unanswered=_unanswered(base))
        return _render(passages) if passages else _no_answer(base)
    finally:
        connection.close()
