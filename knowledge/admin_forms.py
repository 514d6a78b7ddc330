from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from knowledge.extract import MAX_BYTES, ExtractionFailed, text_from_bytes
from knowledge.models import Document


class DocumentForm(forms.ModelForm):
    upload = forms.FileField(
        label=_("file"),
        required=False,
        help_text=_("Text, Markdown, HTML or PDF. Uploading again replaces the document's chunks."),
    )

    url = forms.URLField(label=_("url"), required=False, max_length=1000, assume_scheme="https")

    class Meta:
        model = Document
        fields = ["base", "title", "source", "url", "tags"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # An upload's title defaults to the one in the file or its name; a URL's to the URL.
        self.fields["title"].required = False

    def clean(self):
        cleaned = super().clean()
        upload = cleaned.get("upload")
        self.extracted = None
        if cleaned.get("source") == Document.Source.UPLOAD:
            if upload is None and not (self.instance.pk and self.instance.text):
                raise ValidationError({"upload": _("Choose the file to upload.")})
            if upload is not None:
                if upload.size > MAX_BYTES:
                    raise ValidationError({"upload": _("The file is larger than %(n)s bytes.") % {"n": MAX_BYTES}})
                try:
                    self.extracted = text_from_bytes(
                        upload.read(), filename=upload.name, content_type=getattr(upload, "content_type", "") or ""
                    )
                except ExtractionFailed as exc:
                    raise ValidationError({"upload": str(exc)}) from exc
                if not cleaned.get("title"):
                    cleaned["title"] = (self.extracted[0] or upload.name)[:300]
                    self.instance.title = cleaned["title"]
        elif upload is not None:
            raise ValidationError({"upload": _("A URL document is fetched from its URL; choose the upload source.")})
        elif not cleaned.get("title") and cleaned.get("url"):
            cleaned["title"] = self.instance.title = cleaned["url"][:300]
        if not cleaned.get("title"):
            raise ValidationError({"title": _("Give the document a title.")})
        return cleaned
