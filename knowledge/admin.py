from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from knowledge.admin_forms import BaseSearchForm, BaseUploadForm, DocumentForm
from knowledge.embeddings import EmbeddingFailed
from knowledge.models import Chunk, Document, DocumentUpload, EmbeddingCall, KnowledgeBase, KnowledgeSearch
from knowledge.retrieval import search
from knowledge.sections import location_label
from knowledge.services import base_index_enqueue, document_file_store, document_upload, knowledge_base_save
from platform_site.admin_mixins import JSONInputAdminMixin, ReadOnlyAdminMixin, ReadOnlyInline
from workspaces.admin_scope import WorkspaceScopedAdmin, WorkspaceScopedInline

# Settings whose change makes the stored chunks or vectors stale.
_INDEX_FIELDS = {"chunk_size", "chunk_overlap", "embedding_model"}


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["name", "status", "progress", "keyword_method", "embedding_model", "search_tool"]
    list_filter = ["status", "keyword_method"]
    list_select_related = ["embedding_model", "search_tool"]
    search_fields = ["name", "description"]
    readonly_fields = ["search_tool", "status", "progress", "last_error", "created_at", "updated_at"]
    fields = [
        "name",
        "description",
        "chunk_size",
        "chunk_overlap",
        "keyword_method",
        "embedding_model",
        "score_threshold",
        "fallback_answer",
        "on_nothing_found",
        *readonly_fields,
    ]
    actions = ["reindex_selected"]
    # Below the form: the base's documents, an upload and a test search (change_view).
    change_form_template = "admin/knowledge/knowledgebase/change_form.html"

    def get_queryset(self, request):
        # Counted from the documents themselves, so the figure is the base's whatever was queued last.
        return (
            super()
            .get_queryset(request)
            .annotate(
                document_count=Count("documents"),
                indexed_count=Count("documents", filter=Q(documents__status=Document.Status.INDEXED)),
            )
        )

    @admin.display(description=gettext_lazy("indexed"), ordering="indexed_count")
    def progress(self, obj):
        return _("%(indexed)s of %(total)s documents") % {"indexed": obj.indexed_count, "total": obj.document_count}

    def save_model(self, request, obj, form, change):
        knowledge_base_save(base=obj)
        if change and _INDEX_FIELDS & set(form.changed_data):
            count = base_index_enqueue(base=obj)
            self.message_user(request, _("Re-indexing %(n)s documents with the new settings.") % {"n": count})

    @admin.action(description=gettext_lazy("Re-index selected knowledge bases"), permissions=["change"])
    def reindex_selected(self, request, queryset):
        total = sum(base_index_enqueue(base=base) for base in queryset)
        self.message_user(request, _("Re-indexing %(n)s documents.") % {"n": total}, messages.SUCCESS)

    def get_urls(self):
        upload = self.admin_site.admin_view(require_POST(self.upload_view))
        return [path("<path:object_id>/upload/", upload, name="knowledge_knowledgebase_upload")] + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        base = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        if base is not None and self.has_view_or_change_permission(request, base):
            extra.update(self._documents_context(request, base))
            extra.update(self._search_context(request, base))
        return super().change_view(request, object_id, form_url, extra)

    def _documents_context(self, request, base: KnowledgeBase) -> dict:
        user = request.user
        context = {
            "can_upload": user.has_perm("knowledge.add_document") or user.has_perm("knowledge.change_document"),
            "upload_form": BaseUploadForm(),
            "show_documents": user.has_perm("knowledge.view_document") or user.has_perm("knowledge.change_document"),
        }
        if context["show_documents"]:
            context["base_documents"] = list(
                Document.objects.filter(base=base)
                .only("pk", "title", "status", "error", "filename", "updated_at")
                .annotate(chunk_total=Count("chunks"))
                .order_by("title")
            )
        return context

    def _search_context(self, request, base: KnowledgeBase) -> dict:
        vectors = base.embedding_model_id is not None
        if request.method != "GET" or "q" not in request.GET:
            return {"search_form": BaseSearchForm(vectors=vectors)}
        form = BaseSearchForm(request.GET, vectors=vectors)
        context = {"search_form": form, "search_done": False}
        if form.is_valid():
            try:
                passages = search(
                    base=KnowledgeBase.objects.select_related("embedding_model").get(pk=base.pk),
                    query=form.cleaned_data["q"],
                    top_k=form.cleaned_data["top_k"],
                    mode=form.cleaned_data["mode"],
                )
            except EmbeddingFailed as exc:
                context["search_error"] = _("The embedding model could not embed the query: %(error)s") % {"error": exc}
            else:
                context.update(search_done=True, search_results=passages)
        return context

    def upload_view(self, request, object_id):
        base = self.get_object(request, unquote(object_id))
        if base is None:
            raise Http404
        if not self.has_view_or_change_permission(request, base):
            raise PermissionDenied
        page = reverse("admin:knowledge_knowledgebase_change", args=[base.pk])
        form = BaseUploadForm(request.POST, request.FILES)
        if not form.is_valid():
            for error in form.errors.get("upload", []):
                self.message_user(request, error, messages.ERROR)
            return redirect(page)
        upload = form.cleaned_data["upload"]
        name = upload.name[:300]
        document = Document.objects.filter(base=base, source=Document.Source.UPLOAD, filename=name).first()
        if document is not None:
            # The same file name again: a new version of that document.
            if not request.user.has_perm("knowledge.change_document"):
                raise PermissionDenied
            title_from_content = document.title == name
        else:
            if not request.user.has_perm("knowledge.add_document"):
                raise PermissionDenied
            if Document.objects.filter(base=base, title=name).exists():
                self.message_user(
                    request,
                    _("Another document of this base is titled “%(title)s”; rename the file.") % {"title": name},
                    messages.ERROR,
                )
                return redirect(page)
            document, title_from_content = Document(base=base, title=name), True
        document_file_store(
            document=document,
            data=upload.read(),
            filename=name,
            content_type=getattr(upload, "content_type", "") or "",
            title_from_content=title_from_content,
        )
        self.message_user(
            request,
            _("“%(name)s” is stored; a worker reads and indexes it (the list below shows its status).")
            % {"name": name},
            messages.SUCCESS,
        )
        return redirect(page)


class ChunkInline(WorkspaceScopedInline, ReadOnlyInline):
    model = Chunk
    fields = ["ordinal", "where", "text", "has_embedding"]
    readonly_fields = fields
    show_change_link = False

    @admin.display(description=gettext_lazy("location"))
    def where(self, obj):
        return location_label(obj.location)

    @admin.display(description=gettext_lazy("embedded"), boolean=True)
    def has_embedding(self, obj):
        return obj.embedding is not None


@admin.register(Document)
class DocumentAdmin(JSONInputAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    form = DocumentForm
    list_display = ["title", "base", "source", "status", "chunk_count", "reason", "updated_at"]
    list_filter = ["status", "source", "base"]
    list_select_related = ["base"]
    search_fields = ["title", "url", "filename"]
    readonly_fields = [
        "filename",
        "pending_file",
        "status",
        "error",
        "content_hash",
        "text_preview",
        "created_at",
        "updated_at",
    ]
    inlines = [ChunkInline]
    actions = ["reindex_selected"]

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []  # a new document has no chunks yet

    def get_fields(self, request, obj=None):
        return ["base", "title", "source", "url", "tags", "upload", *self.readonly_fields]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(chunk_total=Count("chunks"))

    @admin.display(description=gettext_lazy("chunks"), ordering="chunk_total")
    def chunk_count(self, obj):
        return obj.chunk_total

    @admin.display(description=gettext_lazy("failure reason"))
    def reason(self, obj):
        return obj.error[:120]

    @admin.display(description=gettext_lazy("file waiting to be read"))
    def pending_file(self, obj):
        upload = DocumentUpload.objects.filter(document=obj).only("filename", "size").first() if obj.pk else None
        if upload is None:
            return "-"
        return _("%(name)s (%(size)s bytes)") % {"name": upload.filename, "size": upload.size}

    @admin.display(description=gettext_lazy("text"))
    def text_preview(self, obj):
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", obj.text[:3000])

    def save_model(self, request, obj, form, change):
        upload = form.cleaned_data.get("upload")
        if upload is None:
            document_upload(document=obj)
            return
        document_file_store(
            document=obj,
            data=upload.read(),
            filename=upload.name,
            content_type=getattr(upload, "content_type", "") or "",
            title_from_content=form.title_from_content,
        )

    @admin.action(description=gettext_lazy("Re-index selected documents"), permissions=["change"])
    def reindex_selected(self, request, queryset):
        for base_id in set(queryset.values_list("base_id", flat=True)):
            ids = list(queryset.filter(base_id=base_id).values_list("pk", flat=True))
            base_index_enqueue(base=KnowledgeBase.objects.get(pk=base_id), document_ids=ids)
        self.message_user(request, _("Re-indexing %(n)s documents.") % {"n": queryset.count()}, messages.SUCCESS)


@admin.register(KnowledgeSearch)
class KnowledgeSearchAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["id", "base", "run", "query", "passage_count", "fallback", "handed_off", "created_at"]
    list_filter = ["fallback", "handed_off", "base"]
    list_select_related = ["base"]
    raw_id_fields = ["run"]
    search_fields = ["query", "run__id", "tool_call_id"]
    show_full_result_count = False

    @admin.display(description=gettext_lazy("passages"))
    def passage_count(self, obj):
        return len(obj.passages)


@admin.register(EmbeddingCall)
class EmbeddingCallAdmin(ReadOnlyAdminMixin, WorkspaceScopedAdmin, admin.ModelAdmin):
    list_display = ["id", "base", "document", "llm_call"]
    list_filter = ["base"]
    list_select_related = ["base", "document", "llm_call"]
    raw_id_fields = ["llm_call"]
    show_full_result_count = False
