"""Admin forms of the knowledge app. An upload is checked only for what is cheap to check (its
size and kind) and stored: the worker reads it, in a limited child process (knowledge.parsing)."""

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from knowledge.extract import ExtractionFailed, file_kind
from knowledge.models import Document, DocumentUpload
from knowledge.retrieval import Mode


def check_upload(upload) -> None:
    """Refuse a file too large or of a kind the worker cannot read, before anything is stored."""
    limit = settings.AGENTRY_KNOWLEDGE_MAX_FILE_BYTES
    if upload.size > limit:
        raise ValidationError(_("The file is larger than %(n)s bytes.") % {"n": limit})
    upload.seek(0)
    head = upload.read(8)
    upload.seek(0)
    try:
        file_kind(filename=upload.name, content_type=getattr(upload, "content_type", "") or "", head=head)
    except ExtractionFailed as exc:
        raise ValidationError(str(exc)) from exc


class DocumentForm(forms.ModelForm):
    upload = forms.FileField(
        label=_("file"),
        required=False,
        help_text=_(
            "Text, Markdown, HTML, CSV, PDF (scanned pages are read by OCR), Word, Excel, PowerPoint or a PNG/JPEG "
            "image. It is read on a worker after you save: the document is "
            "pending until then, and failed with the reason if it cannot be read. Uploading again "
            "replaces the document's chunks."
        ),
    )

    url = forms.URLField(label=_("url"), required=False, max_length=1000, assume_scheme="https")

    class Meta:
        model = Document
        fields = ["base", "title", "source", "url", "tags"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # An upload's title defaults to its file name (then to the title the worker finds in the
        # file); a URL's to the URL (then to the page's title).
        if "title" in self.fields:  # absent for someone who may only view the document
            self.fields["title"].required = False
        self.title_from_content = False

    def clean(self):
        cleaned = super().clean()
        upload = cleaned.get("upload")
        if cleaned.get("source") == Document.Source.UPLOAD:
            stored = self.instance.pk and (
                self.instance.text or DocumentUpload.objects.filter(document=self.instance).exists()
            )
            if upload is None and not stored:
                raise ValidationError({"upload": _("Choose the file to upload.")})
            if upload is not None:
                try:
                    check_upload(upload)
                except ValidationError as exc:
                    raise ValidationError({"upload": exc.messages}) from exc
                if not cleaned.get("title"):
                    cleaned["title"] = self.instance.title = upload.name[:300]
                    self.title_from_content = True
        elif upload is not None:
            raise ValidationError({"upload": _("A URL document is fetched from its URL; choose the upload source.")})
        elif not cleaned.get("title") and cleaned.get("url"):
            cleaned["title"] = self.instance.title = cleaned["url"][:300]
        if not cleaned.get("title"):
            raise ValidationError({"title": _("Give the document a title.")})
        return cleaned


class BaseUploadForm(forms.Form):
    """An upload on a knowledge base's page: a new document, or a new version of the base's
    document uploaded from a file of the same name."""

    upload = forms.FileField(
        label=_("file"), help_text=_("Text, Markdown, HTML, CSV, PDF, Word, Excel, PowerPoint or a PNG/JPEG image.")
    )

    def clean_upload(self):
        upload = self.cleaned_data["upload"]
        check_upload(upload)
        return upload


class BaseSearchForm(forms.Form):
    """A test search on a knowledge base's page: what its search tool would return."""

    q = forms.CharField(label=_("query"), max_length=1000, strip=True)
    mode = forms.ChoiceField(label=_("method"))
    top_k = forms.IntegerField(label=_("results"), min_value=1, max_value=10, initial=5)

    def __init__(self, *args, vectors: bool, **kwargs):
        super().__init__(*args, **kwargs)
        # Vector and combined search need the base's embedding model.
        choices = [(Mode.KEYWORD, _("keyword (BM25)"))]
        if vectors:
            choices = [(Mode.COMBINED, _("combined (RRF)")), *choices, (Mode.VECTOR, _("vector (cosine)"))]
        self.fields["mode"].choices = choices
        self.fields["mode"].initial = choices[0][0]
