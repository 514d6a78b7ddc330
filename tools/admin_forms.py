"""Admin forms for tools and MCP servers.

Secrets (HTTP tool credentials, MCP environment values and headers) are write-only here:
the stored values are never sent to the browser, a new JSON object replaces them, and the
change page shows only the names with masked values.
"""

import copy
import json

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from platform_site.crypto import mask
from tools.models import MCPServer, ToolDefinition, secret_mapping, validate_secret_mapping
from tools.remote_agents import PARAMETERS as A2A_PARAMETERS
from tools.remote_agents import CardError, card_refresh


def masked_mapping(value: str) -> str:
    mapping = secret_mapping(value)
    return ", ".join(f"{name}: {mask(secret)}" for name, secret in mapping.items()) or _("none")


def _new_secret(label) -> forms.CharField:
    return forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off"}),
        label=label,
        help_text=gettext_lazy(
            'A JSON object, e.g. {"Authorization": "Bearer …"}. It replaces the stored one; leave empty to keep it.'
        ),
    )


def _clear_secret(label) -> forms.BooleanField:
    return forms.BooleanField(required=False, label=label)


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


class _SuperuserOnlyFieldsForm(_SecretMappingsForm):
    """Fields that make the server run a program, load code or set a process environment exist
    only for superusers: for anyone else they are removed from the form, so a crafted POST
    cannot set them either (the admin shows their values read-only)."""

    superuser_only: tuple[str, ...] = ()
    user = None  # set by the admin

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.for_superuser:
            for name in self.superuser_only:
                self.fields.pop(name, None)

    @property
    def for_superuser(self) -> bool:
        return self.user is not None and self.user.is_active and self.user.is_superuser

    def _update_errors(self, errors):
        # The model's clean() may name a field this user is not given: say it above the form.
        if hasattr(errors, "error_dict"):
            for name in [n for n in errors.error_dict if n != NON_FIELD_ERRORS and n not in self.fields]:
                errors.error_dict.setdefault(NON_FIELD_ERRORS, []).extend(errors.error_dict.pop(name))
        super()._update_errors(errors)


STARTER_PARAMETERS = {"type": "object", "properties": {}, "required": []}
PARAMETERS_HELP = gettext_lazy(
    "JSON Schema of the arguments, e.g. "
    '{"type": "object", "properties": {"city": {"type": "string", "description": "City name"}}, '
    '"required": ["city"]}.'
)


def _python_target(kind: str, name: str, python_callable: str) -> str | None:
    """The registered callable a tool runs, if it is a python tool."""
    return (python_callable or name) if kind == ToolDefinition.Kind.PYTHON else None


class ToolDefinitionForm(_SuperuserOnlyFieldsForm):
    secret_fields = ("http_secret_headers", "a2a_secret_headers")
    superuser_only = ("python_callable",)
    new_http_secret_headers = _new_secret(gettext_lazy("New secret headers"))
    clear_http_secret_headers = _clear_secret(gettext_lazy("Remove the stored secret headers"))
    new_a2a_secret_headers = _new_secret(gettext_lazy("New remote agent secret headers"))
    clear_a2a_secret_headers = _clear_secret(gettext_lazy("Remove the stored remote agent secret headers"))
    refresh_a2a_card = forms.BooleanField(
        required=False,
        label=gettext_lazy("Fetch the agent card again"),
        help_text=gettext_lazy("The card is fetched when the URL changes; tick this to see the agent's new skills."),
    )

    class Meta:
        model = ToolDefinition
        exclude = ["http_secret_headers", "a2a_secret_headers"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A bare {} tells a newcomer nothing: a new tool starts from an empty object schema.
        if self.instance._state.adding and not self.is_bound and not self.initial.get("parameters"):
            self.initial["parameters"] = copy.deepcopy(STARTER_PARAMETERS)
        if "parameters" in self.fields:
            self.fields["parameters"].help_text = PARAMETERS_HELP
            # A remote agent's arguments are the same for every one (tools.remote_agents.PARAMETERS).
            if self.data.get("kind") == ToolDefinition.Kind.A2A:
                self.fields["parameters"].required = False

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("kind") == ToolDefinition.Kind.A2A:
            cleaned["parameters"] = A2A_PARAMETERS
            self._fetch_card(cleaned)
        if self.for_superuser:
            return cleaned
        # Kind and name decide the python callable too (it defaults to the tool's name).
        tool = self.instance
        before = None if tool._state.adding else _python_target(tool.kind, tool.name, tool.python_callable)
        after = _python_target(
            cleaned.get("kind", tool.kind),
            cleaned.get("name", tool.name),
            cleaned.get("python_callable", tool.python_callable),
        )
        if after is not None and after != before:
            raise ValidationError(_("Only a superuser can choose the python code a tool runs."))
        return cleaned

    def _fetch_card(self, cleaned) -> None:
        """Fetch the agent card (through the outbound guard) when the URL is new or changed, or
        when asked, so that the model's clean() checks the skill against it."""
        tool, url = self.instance, cleaned.get("a2a_card_url") or ""
        if not url:
            return
        if url == tool.a2a_card_url and tool.a2a_card and not cleaned.get("refresh_a2a_card"):
            return
        probe = ToolDefinition(a2a_card_url=url, a2a_skill=cleaned.get("a2a_skill") or "")
        if cleaned.get("new_a2a_secret_headers"):
            probe.a2a_secret_headers = cleaned["new_a2a_secret_headers"]
        elif not cleaned.get("clear_a2a_secret_headers"):
            probe.a2a_secret_headers = tool.a2a_secret_headers
        try:
            card_refresh(tool=probe)
        except CardError as exc:
            self.add_error("a2a_card_url", str(exc))
            return
        tool.a2a_card, tool.a2a_card_fetched_at = probe.a2a_card, probe.a2a_card_fetched_at


class MCPServerForm(_SuperuserOnlyFieldsForm):
    secret_fields = ("env", "headers")
    # A stdio server is a program the web process and the workers start, with this environment.
    superuser_only = ("command", "args", "new_env", "clear_env")
    new_env = _new_secret(gettext_lazy("New environment"))
    clear_env = _clear_secret(gettext_lazy("Remove the stored environment"))
    new_headers = _new_secret(gettext_lazy("New headers"))
    clear_headers = _clear_secret(gettext_lazy("Remove the stored headers"))
    url = forms.URLField(
        max_length=1000,
        required=False,
        assume_scheme="https",
        help_text=gettext_lazy("streamable HTTP: the endpoint, e.g. https://…/mcp."),
    )

    class Meta:
        model = MCPServer
        exclude = ["env", "headers", "discovered_at", "last_error"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.for_superuser and "transport" in self.fields:
            self.fields["transport"].choices = [
                choice for choice in self.fields["transport"].choices if choice[0] != MCPServer.Transport.STDIO
            ]
            self.fields["transport"].initial = MCPServer.Transport.STREAMABLE_HTTP

    def clean(self):
        cleaned = super().clean()
        stdio = cleaned.get("transport", self.instance.transport) == MCPServer.Transport.STDIO
        touched = {"transport", *self.superuser_only} & set(self.changed_data)
        if stdio and not self.for_superuser and (self.instance._state.adding or touched):
            raise ValidationError(_("Only a superuser can set the command a worker runs (stdio servers)."))
        return cleaned


class OpenAPIImportForm(forms.Form):
    document = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 16, "style": "font-family: monospace; width: 90%"}),
        help_text=gettext_lazy("Paste an OpenAPI 3 document (JSON or YAML), or upload it below."),
    )
    upload = forms.FileField(required=False, label=gettext_lazy("or upload a file"))
    base_url = forms.URLField(
        required=False,
        assume_scheme="https",
        help_text=gettext_lazy("The API's base URL; empty uses the document's first server URL."),
    )
    prefix = forms.RegexField(
        regex=r"^[A-Za-z0-9_-]{0,24}$",
        required=False,
        label=gettext_lazy("Prefix"),
        help_text=gettext_lazy("Tool names become <prefix>-<operationId>, e.g. petstore-findPets."),
    )
    # The second submit of an import that changes existing tools: the names shown are the
    # names confirmed, so a document edited in between is asked about again.
    overwrite = forms.BooleanField(required=False, label=gettext_lazy("Replace the existing tools listed above"))
    confirmed = forms.CharField(required=False, widget=forms.HiddenInput)

    def confirmed_names(self) -> set[str]:
        if not self.cleaned_data.get("overwrite"):
            return set()
        return {name for name in self.cleaned_data.get("confirmed", "").split(",") if name}

    def clean(self):
        cleaned = super().clean()
        upload = cleaned.get("upload")
        if upload is not None:
            if upload.size > 2_000_000:
                raise ValidationError(_("The file is larger than 2 MB."))
            try:
                cleaned["document"] = upload.read().decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValidationError(_("The file is not UTF-8 text.")) from exc
        if not (cleaned.get("document") or "").strip():
            raise ValidationError(_("Paste a document or upload a file."))
        return cleaned
