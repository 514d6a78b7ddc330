"""Knowledge bases: documents cut into chunks an agent searches through its base's tool.

A base owns one ToolDefinition of kind "knowledge" (created with it): attaching that tool to an
agent is how an agent is attached to the base, so the agent's pinned version lists the search
tool like any other. The base's own settings (threshold, fallback, embedding model) are read live
at search time, not pinned.
"""

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from workspaces.defaults import InWorkspace
from workspaces.names import name_unique_in_workspace
from workspaces.references import references_check


class KeywordMethod(models.TextChoices):
    JIEBA = "jieba", _("jieba words + BM25")
    TRIGRAM = "trigram", _("character trigrams + BM25")


class KnowledgeBase(InWorkspace):
    class OnNothingFound(models.TextChoices):
        FALLBACK = "fallback", _("answer the fallback")
        HANDOFF = "handoff", _("hand off to a person")

    class Status(models.TextChoices):
        READY = "ready", _("Ready")
        INDEXING = "indexing", _("Indexing")
        FAILED = "failed", _("Failed")

    name = models.CharField(_("name"), max_length=100)
    description = models.TextField(
        _("description"),
        blank=True,
        help_text=_("What the base holds; the model reads it in the search tool's description."),
    )
    chunk_size = models.PositiveIntegerField(
        _("chunk size"),
        default=500,
        validators=[MinValueValidator(50), MaxValueValidator(8000)],
        help_text=_("Characters per chunk, at most."),
    )
    chunk_overlap = models.PositiveIntegerField(
        _("chunk overlap"), default=50, help_text=_("Characters a chunk repeats from the one before it.")
    )
    keyword_method = models.CharField(
        _("keyword method"), max_length=16, choices=KeywordMethod.choices, default=KeywordMethod.TRIGRAM
    )
    embedding_model = models.ForeignKey(
        "agents.ModelConfig",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("embedding model"),
        help_text=_("An OpenAI-compatible /embeddings endpoint; empty: keyword search only."),
    )
    score_threshold = models.FloatField(
        _("score threshold"),
        default=0.0,
        validators=[MinValueValidator(0)],
        help_text=_(
            "A passage whose best score (BM25, or cosine similarity for vectors) is not above this is not returned."
        ),
    )
    fallback_answer = models.TextField(
        _("fallback answer"),
        blank=True,
        help_text=_("What the agent answers when no passage is found."),
    )
    on_nothing_found = models.CharField(
        _("when nothing is found"),
        max_length=16,
        choices=OnNothingFound.choices,
        default=OnNothingFound.FALLBACK,
        help_text=_(
            "Hand off: the run waits in the approval queue for a person to write the answer; if nobody does "
            "(rejected or expired), the agent answers the fallback."
        ),
    )
    search_tool = models.OneToOneField(
        "tools.ToolDefinition",
        on_delete=models.PROTECT,
        related_name="knowledge_base",
        verbose_name=_("search tool"),
        editable=False,
    )
    status = models.CharField(_("status"), max_length=16, choices=Status.choices, default=Status.READY)
    last_error = models.TextField(_("last error"), blank=True, default="")
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("knowledge base")
        verbose_name_plural = _("knowledge bases")
        constraints = [name_unique_in_workspace("knowledge_base_name_per_workspace")]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)
        if self.chunk_overlap >= self.chunk_size:
            raise ValidationError({"chunk_overlap": _("The overlap must be smaller than the chunk size.")})


class Document(models.Model):
    class Source(models.TextChoices):
        UPLOAD = "upload", _("Upload")
        URL = "url", _("URL")

    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        INDEXED = "indexed", _("Indexed")
        FAILED = "failed", _("Failed")

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "base__workspace"
    base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="documents", verbose_name=_("base"))
    title = models.CharField(_("title"), max_length=300)
    source = models.CharField(_("source"), max_length=16, choices=Source.choices, default=Source.UPLOAD)
    url = models.URLField(_("url"), max_length=1000, blank=True)
    filename = models.CharField(_("file name"), max_length=300, blank=True)
    tags = models.JSONField(_("tags"), default=list, blank=True)
    text = models.TextField(_("text"), blank=True)
    # Where each part of the text is in the file read ([{"location", "header", "chars"}], see
    # knowledge.sections): re-indexing the text without the file keeps the chunks' locations.
    sections = models.JSONField(_("sections"), default=list, blank=True, editable=False)
    content_hash = models.CharField(_("content hash"), max_length=64, blank=True)
    status = models.CharField(_("status"), max_length=16, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(_("error"), blank=True, default="")
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("document")
        verbose_name_plural = _("documents")
        constraints = [models.UniqueConstraint(fields=["base", "title"], name="knowledge_document_title_unique")]

    def __str__(self):
        return self.title

    def clean(self):
        references_check(self)
        if not isinstance(self.tags, list) or not all(isinstance(t, str) and 0 < len(t) <= 100 for t in self.tags):
            raise ValidationError({"tags": _('Use a JSON list of short strings, e.g. ["returns", "zh"].')})
        if self.source == self.Source.URL and not self.url:
            raise ValidationError({"url": _("A URL document needs its URL.")})


class DocumentUpload(models.Model):
    """The file an operator uploaded, kept until the worker has read its text (the web process
    only checks its size and kind): parsing an untrusted file may take any time or memory, so it
    happens in a limited child process on the worker (knowledge.parsing). In the database rather
    than on a disk, so the web and the workers need share nothing else. Uploading again replaces
    it; a document that failed keeps it, so re-indexing reads it again (with new limits, say)."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "document__base__workspace"
    document = models.OneToOneField(
        Document, on_delete=models.CASCADE, related_name="pending_upload", verbose_name=_("document")
    )
    filename = models.CharField(_("file name"), max_length=300)
    content_type = models.CharField(_("content type"), max_length=200, blank=True)
    data = models.BinaryField(_("data"))
    size = models.PositiveIntegerField(_("size"))
    # The operator gave no title: the file name stands in until the worker finds one in the content.
    title_from_content = models.BooleanField(_("title from content"), default=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("document upload")
        verbose_name_plural = _("document uploads")

    def __str__(self):
        return self.filename


class Chunk(models.Model):
    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "document__base__workspace"
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks", verbose_name=_("document"))
    ordinal = models.PositiveIntegerField(_("ordinal"))
    text = models.TextField(_("text"))
    # Where in the file the chunk is, for citations: {"page": 3}, {"slide": 2}, {"sheet": …,
    # "rows": [first, last]}, {"heading": …} or {} (knowledge.sections.location_label).
    location = models.JSONField(_("location"), default=dict, blank=True)
    # Term counts of the chunk for both keyword methods ({"jieba": {...}, "trigram": {...}}),
    # computed once at indexing so a search only reads them.
    terms = models.JSONField(_("terms"), default=dict)
    embedding = models.JSONField(_("embedding"), null=True, blank=True)

    class Meta:
        verbose_name = _("chunk")
        verbose_name_plural = _("chunks")
        ordering = ["document", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["document", "ordinal"], name="knowledge_chunk_ordinal_unique")]

    def __str__(self):
        return f"{self.document} #{self.ordinal}"


class EmbeddingCall(models.Model):
    """Which base (and document, while indexing) an embedding LLMCall served: the LLMCall row
    lives below this app and has no run while indexing, so the link is kept here."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "base__workspace"
    llm_call = models.OneToOneField(
        "conversations.LLMCall", on_delete=models.CASCADE, related_name="+", verbose_name=_("LLM call")
    )
    base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="+", verbose_name=_("base"))
    document = models.ForeignKey(
        Document, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("document")
    )

    class Meta:
        verbose_name = _("embedding call")
        verbose_name_plural = _("embedding calls")


class KnowledgeSearch(models.Model):
    """One search by an agent: the ledger row of a call of a base's search tool."""

    # Its workspace is its parent's (workspaces.access.in_workspace).
    workspace_path = "base__workspace"
    base = models.ForeignKey(KnowledgeBase, on_delete=models.PROTECT, related_name="searches", verbose_name=_("base"))
    run = models.ForeignKey(
        "conversations.Run", on_delete=models.CASCADE, related_name="knowledge_searches", verbose_name=_("run")
    )
    tool_call_id = models.CharField(_("tool call id"), max_length=128)
    query = models.TextField(_("query"))
    top_k = models.PositiveSmallIntegerField(_("top k"))
    filters = models.JSONField(_("filters"), default=dict, blank=True)
    # [{"citation": "S1", "chunk": id, "document": id, "title": str, "score": float}, ...]
    passages = models.JSONField(_("passages"), default=list)
    fallback = models.BooleanField(_("fallback"), default=False, help_text=_("Nothing scored above the threshold."))
    handed_off = models.BooleanField(
        _("handed off"), default=False, help_text=_("Nothing was found and a person was asked to answer.")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("knowledge search")
        verbose_name_plural = _("knowledge searches")
        ordering = ["run", "created_at", "id"]

    def __str__(self):
        return self.query[:60]
