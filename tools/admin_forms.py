"""Admin forms for tools and MCP servers.

Secrets (HTTP tool credentials, MCP environment values and headers) are write-only here:
the stored values are never sent to the browser, a new JSON object replaces them, and the
change page shows only the names with masked values.
"""

import json

from django import forms
from django.core.exceptions import ValidationError

from platform_site.crypto import mask
from tools.models import MCPServer, ToolDefinition, secret_mapping, validate_secret_mapping


def masked_mapping(value: str) -> str:
    mapping = secret_mapping(value)
    return ", ".join(f"{name}: {mask(secret)}" for name, secret in mapping.items()) or "none"


def _new_secret(label: str) -> forms.CharField:
    return forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}), label=f"New {label}",
        help_text='A JSON object, e.g. {"Authorization": "Bearer …"}. It replaces the stored one; leave empty to keep it.',
    )


def _clear_secret(label: str) -> forms.BooleanField:
    return forms.BooleanField(required=False, label=f"Remove the stored {label}")


class _SecretMappingsForm(forms.ModelForm):
    """For each encrypted JSON field named in `secret_fields`, the subclass declares the
    write-only inputs `new_<field>` and `clear_<field>`."""

    secret_fields: tuple[str, ...] = ()

    def clean(self):
        cleaned = super().clean()
        for name in self.secret_fields:
            value = (cleaned.get(f"new_{name}") or "").strip()
            if value:
                try:
                    validate_secret_mapping(value)
                except ValidationError as exc:
                    self.add_error(f"new_{name}", exc)
                    continue
                cleaned[f"new_{name}"] = json.dumps(json.loads(value), ensure_ascii=False)
        return cleaned

    def _post_clean(self):
        # The model's clean() runs here; the instance must already carry the new secrets.
        for name in self.secret_fields:
            if self.cleaned_data.get(f"clear_{name}"):
                setattr(self.instance, name, "")
            elif self.cleaned_data.get(f"new_{name}"):
                setattr(self.instance, name, self.cleaned_data[f"new_{name}"])
        super()._post_clean()


class ToolDefinitionForm(_SecretMappingsForm):
    secret_fields = ("http_secret_headers",)
    new_http_secret_headers = _new_secret("secret headers")
    clear_http_secret_headers = _clear_secret("secret headers")

    class Meta:
        model = ToolDefinition
        exclude = ["http_secret_headers"]


class MCPServerForm(_SecretMappingsForm):
    secret_fields = ("env", "headers")
    new_env = _new_secret("environment")
    clear_env = _clear_secret("environment")
    new_headers = _new_secret("headers")
    clear_headers = _clear_secret("headers")
    user = None  # set by the admin: only superusers may have workers run a command
    url = forms.URLField(max_length=1000, required=False, assume_scheme="https",
                         help_text="streamable HTTP: the endpoint, e.g. https://…/mcp.")

    class Meta:
        model = MCPServer
        exclude = ["env", "headers", "discovered_at", "last_error"]

    def clean(self):
        cleaned = super().clean()
        stdio = cleaned.get("transport") == MCPServer.Transport.STDIO
        if stdio and self.user is not None and not self.user.is_superuser and (
            self.instance._state.adding or {"transport", "command", "args"} & set(self.changed_data)
        ):
            raise ValidationError("Only a superuser can set the command a worker runs (stdio servers).")
        return cleaned


class OpenAPIImportForm(forms.Form):
    document = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 16, "style": "font-family: monospace; width: 90%"}),
        help_text="Paste an OpenAPI 3 document (JSON or YAML), or upload it below.",
    )
    upload = forms.FileField(required=False, label="or upload a file")
    base_url = forms.URLField(
        required=False, assume_scheme="https", help_text="The API's base URL; empty uses the document's first server URL.",
    )
    prefix = forms.RegexField(
        regex=r"^[A-Za-z0-9_-]{0,24}$", required=False,
        help_text="Tool names become <prefix>-<operationId>, e.g. petstore-findPets.",
    )

    def clean(self):
        cleaned = super().clean()
        upload = cleaned.get("upload")
        if upload is not None:
            if upload.size > 2_000_000:
                raise ValidationError("The file is larger than 2 MB.")
            try:
                cleaned["document"] = upload.read().decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValidationError("The file is not UTF-8 text.") from exc
        if not (cleaned.get("document") or "").strip():
            raise ValidationError("Paste a document or upload a file.")
        return cleaned
