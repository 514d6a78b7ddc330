import json
import re

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from platform_site.crypto import EncryptedTextField
from tools.approval_policy import ApprovalExpiry, ApprovalPolicy, validate_rule
from tools.registry import registry
from workspaces.defaults import InWorkspace
from workspaces.names import name_unique_in_workspace
from workspaces.references import references_check

# Providers accept ^[a-zA-Z0-9_-]{1,64}$ for function names (OpenAI's rule, the strictest).
tool_name_validator = RegexValidator(
    r"^[A-Za-z0-9_-]{1,64}$", "Use 1–64 letters, digits, '_' or '-' (the providers' rule)."
)


def validate_parameters_schema(value) -> None:
    if not isinstance(value, dict):
        raise ValidationError("Parameters must be a JSON Schema object.")
    if value.get("type", "object") != "object":
        raise ValidationError('A tool\'s parameters schema must have "type": "object".')
    try:
        Draft202012Validator.check_schema(value)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.path) or "(root)"
        raise ValidationError(f"Not a valid JSON Schema at {path}: {exc.message}") from exc


def secret_mapping(value: str) -> dict[str, str]:
    """A decrypted secret field that holds a JSON object of names to values ("" = none)."""
    return json.loads(value) if value else {}


def validate_secret_mapping(value: str) -> None:
    try:
        mapping = secret_mapping(value)
    except ValueError as exc:
        raise ValidationError(f"Not valid JSON: {exc}") from exc
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise ValidationError('Use a JSON object of names to string values, e.g. {"Authorization": "Bearer …"}.')


mcp_server_name_validator = RegexValidator(
    r"^[A-Za-z0-9_-]{1,32}$", "Use 1–32 letters, digits, '_' or '-': it prefixes the names of its tools."
)


class MCPServer(InWorkspace):
    """A Model Context Protocol server whose tools agents can use (seed 000's "server-tool" names)."""

    class Transport(models.TextChoices):
        STDIO = "stdio", _("stdio (a local command)")
        STREAMABLE_HTTP = "streamable_http", _("streamable HTTP")

    name = models.CharField(_("name"), max_length=32, validators=[mcp_server_name_validator])
    description = models.TextField(_("description"), blank=True)
    transport = models.CharField(_("transport"), max_length=16, choices=Transport.choices, default=Transport.STDIO)
    command = models.CharField(
        _("command"), max_length=500, blank=True, help_text=_("stdio: the program to start, e.g. uvx.")
    )
    args = models.JSONField(
        _("args"), default=list, blank=True, help_text=_('stdio: its arguments, e.g. ["mcp-server-time"].')
    )
    env = EncryptedTextField(
        _("env"),
        blank=True,
        default="",
        validators=[validate_secret_mapping],
        help_text=_("stdio: extra environment variables (JSON object), encrypted at rest."),
    )
    url = models.URLField(
        _("url"), max_length=1000, blank=True, help_text=_("streamable HTTP: the endpoint, e.g. https://…/mcp.")
    )
    headers = EncryptedTextField(
        _("headers"),
        blank=True,
        default="",
        validators=[validate_secret_mapping],
        help_text=_("streamable HTTP: headers (JSON object), encrypted at rest."),
    )
    trusted = models.BooleanField(
        _("trusted"),
        default=False,
        help_text=_(
            "Trust the server's tool annotations (readOnlyHint, destructiveHint) when tools are discovered. "
            "Tools of an untrusted server start as writes that need approval."
        ),
    )
    connect_timeout_seconds = models.FloatField(
        _("connect timeout seconds"), default=20, validators=[MinValueValidator(1)]
    )
    is_active = models.BooleanField(_("is active"), default=True)
    discovered_at = models.DateTimeField(_("discovered at"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True, default="")
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name_plural = _("MCP servers")
        verbose_name = _("MCP server")
        constraints = [name_unique_in_workspace("mcp_server_name_per_workspace")]

    def __str__(self):
        return self.name

    def clean(self):
        if self.transport == self.Transport.STDIO and not self.command:
            raise ValidationError({"command": "A stdio server needs the command that starts it."})
        if self.transport == self.Transport.STREAMABLE_HTTP and not self.url:
            raise ValidationError({"url": "A streamable HTTP server needs its URL."})
        if not isinstance(self.args, list) or not all(isinstance(a, str) for a in self.args):
            raise ValidationError({"args": 'Use a JSON list of strings, e.g. ["--local-timezone", "UTC"].'})


URL_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_.-]+)\}")
SAFE_HTTP_METHODS = frozenset({"GET", "HEAD"})


def url_placeholders(template: str) -> list[str]:
    return URL_PLACEHOLDER.findall(template)


class ToolDefinition(InWorkspace):
    class Kind(models.TextChoices):
        PYTHON = "python", _("Python (registered callable)")
        HTTP = "http", _("HTTP endpoint")
        MCP = "mcp", _("MCP server tool")
        # Made by a knowledge base for itself (the knowledge app registers its executor).
        KNOWLEDGE = "knowledge", _("Knowledge base search")
        # Another agent, reached over the A2A protocol (tools.remote_agents).
        A2A = "a2a", _("Remote agent (A2A)")

    class HttpMethod(models.TextChoices):
        GET = "GET"
        POST = "POST"
        PUT = "PUT"
        PATCH = "PATCH"
        DELETE = "DELETE"

    class SideEffect(models.TextChoices):
        READ = "read", _("read")
        WRITE = "write", _("write")

    name = models.CharField(_("name"), max_length=64, validators=[tool_name_validator])
    description = models.TextField(_("description"), help_text=_("When the model should use it, and what it returns."))
    parameters = models.JSONField(
        _("parameters"),
        default=dict,
        validators=[validate_parameters_schema],
        help_text=_("JSON Schema of the arguments."),
    )
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices, default=Kind.PYTHON)
    python_callable = models.CharField(
        _("python callable"),
        max_length=200,
        blank=True,
        help_text=_("Registry name of the python tool; defaults to the tool name."),
    )
    side_effect = models.CharField(_("side effect"), max_length=8, choices=SideEffect.choices, default=SideEffect.READ)
    idempotent = models.BooleanField(
        _("idempotent"), default=False, help_text=_("Safe to run again after a crash left its outcome unknown.")
    )
    approval_policy = models.CharField(
        _("approval policy"),
        max_length=16,
        choices=ApprovalPolicy.choices,
        default=ApprovalPolicy.AUTO,
        help_text=_("When a call waits for a person's approval. Agents can override it per tool."),
    )
    approval_rule = models.CharField(
        _("approval rule"),
        max_length=500,
        blank=True,
        help_text=_(
            'With "when the rule matches": an expression on the arguments, e.g. amount > 1000 '
            'or currency != "CNY". Arguments are names; args is the whole object.'
        ),
    )
    approval_timeout_seconds = models.PositiveIntegerField(
        _("approval timeout seconds"),
        null=True,
        blank=True,
        default=86400,
        validators=[MinValueValidator(1)],
        help_text=_("A pending approval expires after this long; empty: it waits until decided or cancelled."),
    )
    approval_on_expiry = models.CharField(
        _("approval on expiry"),
        max_length=16,
        choices=ApprovalExpiry.choices,
        default=ApprovalExpiry.CONTINUE,
        help_text=_("What an expired approval does to its run."),
    )
    timeout_seconds = models.FloatField(_("timeout seconds"), default=30, validators=[MinValueValidator(0.1)])
    max_result_chars = models.PositiveIntegerField(
        _("max result chars"), default=8000, validators=[MinValueValidator(100)]
    )
    http_method = models.CharField(_("http method"), max_length=8, choices=HttpMethod.choices, blank=True, default="")
    http_url = models.CharField(
        _("http url"),
        max_length=2000,
        blank=True,
        help_text=_(
            "URL template; {name} is replaced by the argument of that name, e.g. https://api.example.com/pets/{petId}."
        ),
    )
    http_query_params = models.JSONField(
        _("http query params"),
        default=list,
        blank=True,
        help_text=_(
            "Arguments sent as query parameters. The rest (not in the path) go to the JSON body, "
            "or to the query for GET and DELETE."
        ),
    )
    http_body_argument = models.CharField(
        _("http body argument"),
        max_length=64,
        blank=True,
        help_text=_("Send this argument's value as the whole JSON body instead."),
    )
    http_headers = models.JSONField(
        _("http headers"), default=dict, blank=True, help_text=_("Plain (not secret) headers for every call.")
    )
    http_secret_headers = EncryptedTextField(
        _("http secret headers"), blank=True, default="", validators=[validate_secret_mapping]
    )
    http_response_pointer = models.CharField(
        _("http response pointer"),
        max_length=500,
        blank=True,
        help_text=_("JSON Pointer to the part of a JSON response to keep, e.g. /data/items; empty keeps it all."),
    )
    http_max_response_bytes = models.PositiveIntegerField(
        _("http max response bytes"),
        default=1_000_000,
        validators=[MinValueValidator(1024)],
        help_text=_("A longer response is cut here (text) or refused (JSON)."),
    )
    mcp_server = models.ForeignKey(
        MCPServer, on_delete=models.CASCADE, null=True, blank=True, related_name="tools", verbose_name=_("mcp server")
    )
    mcp_tool_name = models.CharField(
        _("mcp tool name"), max_length=200, blank=True, help_text=_("The tool's name on its MCP server.")
    )
    a2a_card_url = models.URLField(
        _("agent card URL"),
        max_length=1000,
        blank=True,
        help_text=_("Remote agent: its agent card, e.g. https://agents.example.com/.well-known/agent-card.json."),
    )
    a2a_skill = models.CharField(
        _("skill"), max_length=200, blank=True, help_text=_("Remote agent: the id of the card's skill to use.")
    )
    a2a_card = models.JSONField(_("agent card"), default=dict, blank=True, editable=False)
    a2a_card_fetched_at = models.DateTimeField(_("agent card fetched at"), null=True, blank=True, editable=False)
    a2a_secret_headers = EncryptedTextField(
        _("remote agent secret headers"), blank=True, default="", validators=[validate_secret_mapping]
    )
    is_active = models.BooleanField(_("is active"), default=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("tool definition")
        verbose_name_plural = _("tool definitions")
        constraints = [name_unique_in_workspace("tool_definition_name_per_workspace")]

    def __str__(self):
        return self.name

    def clean(self):
        references_check(self)
        if self.approval_policy == ApprovalPolicy.RULE:
            try:
                validate_rule(self.approval_rule, self.parameters)
            except ValidationError as exc:
                raise ValidationError({"approval_rule": exc.messages}) from exc
        if self.kind == self.Kind.PYTHON:
            target = self.python_callable or self.name
            if registry.get(target) is None:
                known = ", ".join(registry.names()) or "none"
                raise ValidationError({"python_callable": f"No python tool {target!r} is registered. Known: {known}."})
        elif self.kind == self.Kind.HTTP:
            self._clean_http()
        elif self.kind == self.Kind.KNOWLEDGE and self._state.adding:
            raise ValidationError({"kind": _("A knowledge search tool is created by its knowledge base.")})
        elif self.kind == self.Kind.MCP and not (self.mcp_server_id and self.mcp_tool_name):
            raise ValidationError("An MCP tool needs its server and the tool's name there (use “Discover tools”).")
        elif self.kind == self.Kind.A2A:
            self._clean_a2a()

    def _clean_a2a(self):
        """The skill must be one the cached card lists (the admin fetches the card before this).
        Another agent usually acts, so a new remote agent tool starts as a write (its calls ask
        for approval under "auto") until an operator says it only answers."""
        if self._state.adding:
            self.side_effect = self.SideEffect.WRITE
        if not self.a2a_card_url:
            raise ValidationError({"a2a_card_url": _("A remote agent needs the URL of its agent card.")})
        skills = [skill.get("id") for skill in (self.a2a_card or {}).get("skills") or []]
        if not self.a2a_card:
            raise ValidationError({"a2a_card_url": _("The agent card has not been fetched yet.")})
        if self.a2a_skill not in skills:
            raise ValidationError(
                {
                    "a2a_skill": _("The card lists no skill %(skill)r. Its skills: %(skills)s.")
                    % {"skill": self.a2a_skill, "skills": ", ".join(map(str, skills)) or _("none")}
                }
            )

    def _clean_http(self):
        # A call other than GET or HEAD is taken to change something, as the OpenAPI import does:
        # a new such tool starts as a write, so its calls ask for approval under the "auto"
        # policy. An operator who knows it only reads can say so once it exists.
        if self._state.adding and self.http_method not in SAFE_HTTP_METHODS:
            self.side_effect = self.SideEffect.WRITE
        errors = {}
        if not self.http_method:
            errors["http_method"] = "Choose the HTTP method."
        if not re.match(r"^https?://[^/{}]+", self.http_url or ""):
            errors["http_url"] = "Use an absolute http(s) URL; only the path and query may hold {placeholders}."
        properties = (self.parameters or {}).get("properties") or {}
        required = set((self.parameters or {}).get("required") or [])
        missing = [n for n in url_placeholders(self.http_url or "") if n not in properties or n not in required]
        if missing:
            errors["parameters"] = f"Path placeholders must be required arguments: {', '.join(missing)}."
        if not isinstance(self.http_query_params, list) or any(n not in properties for n in self.http_query_params):
            errors["http_query_params"] = f"List argument names (known: {', '.join(properties) or 'none'})."
        if self.http_body_argument and self.http_body_argument not in properties:
            errors["http_body_argument"] = "Name one of the arguments."
        if self.http_response_pointer and not self.http_response_pointer.startswith("/"):
            errors["http_response_pointer"] = "A JSON Pointer starts with /, e.g. /data/items."
        if not isinstance(self.http_headers, dict):
            errors["http_headers"] = 'Use a JSON object, e.g. {"Accept": "application/json"}.'
        if errors:
            raise ValidationError(errors)
