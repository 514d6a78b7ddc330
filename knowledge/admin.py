from django.contrib import admin, messages
from django.db.models import Count
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from knowledge.admin_forms import DocumentForm
from knowledge.models import Chunk, Document, EmbeddingCall, KnowledgeBase, KnowledgeSearch
from knowledge.services import base_index_enqueue, document_upload, knowledge_base_save
from platform_site.admin_mixins import JSONInputAdminMixin, ReadOnlyAdminMixin, ReadOnlyInline

# Settings whose change makes the stored chunks or vectors stale.
_INDEX_FIELDS = {"chunk_size", "chunk_overlap", "embedding_model"}


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(admin.ModelAdmin):
    list_display = ["name", "status", "progress", "documents", "keyword_method", "embedding_model", "search_tool"]
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

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(document_count=Count("documents"))

    @admin.display(description=gettext_lazy("documents"), ordering="document_count")
    def documents(self, obj):
        return obj.document_count

    @admin.display(description=gettext_lazy("indexed"))
    def progress(self, obj):
        return f"{obj.indexed_documents}/{obj.total_documents}"

    def save_model(self, request, obj, form, change):
        knowledge_base_save(base=obj)
        if change and _INDEX_FIELDS & set(form.changed_data):
            count = base_index_enqueue(base=obj)
            self.message_user(request, _("Re-indexing %(n)s documents with the new settings.") % {"n": count})

    @admin.action(description=gettext_lazy("Re-index selected knowledge bases"), permissions=["change"])
    def reindex_selected(self, request, queryset):
        total = sum(base_index_enqueue(base=base) for base in queryset)
        self.message_user(request, _("Re-indexing %(n)s documents.") % {"n": total}, messages.SUCCESS)


class ChunkInline(ReadOnlyInline):
    model = Chunk
    fields = ["ordinal", "text", "has_embedding"]
    readonly_fields = fields
    show_change_link = False

    @admin.display(description=gettext_lazy("embedded"), boolean=True)
    def has_embedding(self, obj):
        return obj.embedding is not None


@admin.register(Document)
class DocumentAdmin(JSONInputAdminMixin, admin.ModelAdmin):
    form = DocumentForm
    list_display = ["title", "base", "source", "status", "chunk_count", "updated_at"]
    list_filter = ["status", "source", "base"]
    list_select_related = ["base"]
    search_fields = ["title", "url", "filename"]
    readonly_fields = ["filename", "status", "error", "content_hash", "text_preview", "created_at", "updated_at"]
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

    @admin.display(description=gettext_lazy("text"))
    def text_preview(self, obj):
        return format_html("<pre style='white-space: pre-wrap'>{}</pre>", obj.text[:3000])

    def save_model(self, request, obj, form, change):
        extracted = form.extracted
        if extracted is not None:
            obj.text = extracted[1]
            obj.filename = form.cleaned_data["upload"].name[:300]
        document_upload(document=obj)

    @admin.action(description=gettext_lazy("Re-index selected documents"), permissions=["change"])
    def reindex_selected(self, request, queryset):
        for base_id in set(queryset.values_list("base_id", flat=True)):
            ids = list(queryset.filter(base_id=base_id).values_list("pk", flat=True))
            base_index_enqueue(base=KnowledgeBase.objects.get(pk=base_id), document_ids=ids)
        self.message_user(request, _("Re-indexing %(n)s documents.") % {"n": queryset.count()}, messages.SUCCESS)


@admin.register(KnowledgeSearch)
class KnowledgeSearchAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
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
class EmbeddingCallAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["id", "base", "document", "llm_call"]
    list_filter = ["base"]
    list_select_related = ["base", "document", "llm_call"]
    raw_id_fields = ["llm_call"]
    show_full_result_count = False
