import uuid

from django import forms
from django.db.models import Exists, OuterRef
from django.utils.translation import gettext_lazy as _

from agents.models import Agent, AgentDelegate
from agents.releases import DRAFT, PUBLISHED
from agents.run_choices import RunChoiceRefused, run_choice_check
from agents.selectors import agents_usable_by
from conversations.end_users import END_USER_MAX_CHARS, EndUserInvalid, end_user_clean
from evals.models import EvalSuite
from workspaces.access import in_workspace


class AgentChoiceField(forms.ModelChoiceField):
    """Agents by name; one that another agent delegates to says so and by whom: it expects the
    task its caller writes, not a person's message (the demo model's script answers only that)."""

    callers: dict[int, list[str]] = {}

    def label_from_instance(self, obj) -> str:
        callers = self.callers.get(obj.pk)
        if not callers:
            return obj.name
        return _("%(name)s (sub-agent, called by %(callers)s)") % {"name": obj.name, "callers": ", ".join(callers)}


class AttachmentIdsField(forms.Field):
    """The ids of the attachments a message names, in order (a form's repeated field)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[uuid.UUID]:
        ids = []
        for item in value or []:
            try:
                ids.append(uuid.UUID(str(item)))
            except ValueError:
                raise forms.ValidationError(_("Not an attachment's id: %(value)s"), params={"value": item}) from None
        return ids


class TryAgentForm(forms.Form):
    agent = AgentChoiceField(
        queryset=Agent.objects.none(),
        label=_("Agent"),
        help_text=_("Sub-agents come last: they are meant to be called by another agent, with its task."),
    )
    content = forms.CharField(
        required=False, max_length=20000, label=_("Message"), widget=forms.Textarea(attrs={"rows": 3, "cols": 80})
    )
    conversation = forms.UUIDField(required=False, widget=forms.HiddenInput)
    # Uploaded first (TryAttachmentForm), each for this agent and end user.
    attachments = AttachmentIdsField(required=False)
    end_user = forms.CharField(
        required=False,
        max_length=END_USER_MAX_CHARS,
        label=_("End user"),
        help_text=_("Speak as this end user of an application (their memory); empty: as nobody else."),
        widget=forms.TextInput(attrs={"size": 16}),
    )
    version = forms.CharField(
        required=False,
        max_length=20,
        label=_("Version"),
        help_text=_('Empty: what live traffic gets. Or "draft", "published", or a version number.'),
        widget=forms.TextInput(attrs={"size": 10, "placeholder": _("live")}),
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        # The same agents the user could reach through the API: group restrictions hold here too.
        delegated = AgentDelegate.objects.filter(child=OuterRef("pk"), enabled=True)
        agents = agents_usable_by(user=user).annotate(sub_agent=Exists(delegated)).order_by("sub_agent", "name")
        callers: dict[int, list[str]] = {}
        for child_id, parent in (
            AgentDelegate.objects.filter(enabled=True, child__in=agents)
            .order_by("parent__name")
            .values_list("child_id", "parent__name")
        ):
            callers.setdefault(child_id, []).append(parent)
        self.fields["agent"].queryset = agents
        self.fields["agent"].callers = callers

    def clean_end_user(self) -> str:
        try:
            return end_user_clean(self.cleaned_data["end_user"])
        except EndUserInvalid as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_version(self) -> str | int | None:
        version = self.cleaned_data["version"].strip()
        if not version:
            return None
        if version in (DRAFT, PUBLISHED):
            chosen = version
        elif version.isascii() and version.isdigit() and 0 < int(version) < 2**31:
            chosen = int(version)
        else:
            raise forms.ValidationError(_('Must be "draft", "published" or a version number.'))
        agent = self.cleaned_data.get("agent")
        # The messages API's and forks' rule (agents.run_choices), not a copy of it.
        try:
            run_choice_check(user=self.user, agent_id=agent.pk if agent else None, version=chosen)
        except RunChoiceRefused as exc:
            raise forms.ValidationError(str(exc)) from None
        return chosen

    def clean(self):
        data = super().clean()
        # Blank only with attachments: a photo may say it all.
        if not (data.get("content") or "").strip() and not data.get("attachments") and "content" not in self.errors:
            self.add_error("content", forms.ValidationError(_("This field is required."), code="required"))
        return data


class TryAttachmentForm(forms.Form):
    """One file for the try page's next message to this agent, as this end user."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), label=_("Agent"))
    end_user = forms.CharField(required=False, max_length=END_USER_MAX_CHARS, label=_("End user"))
    file = forms.FileField(allow_empty_file=True, label=_("File"))

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = agents_usable_by(user=user)

    clean_end_user = TryAgentForm.clean_end_user


class EvalCaseFromRunForm(forms.Form):
    suite = forms.ModelChoiceField(queryset=EvalSuite.objects.none(), label=_("Suite"))
    name = forms.CharField(max_length=100, label=_("Case name"))

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        # The suites of the workspace the user acts in.
        self.fields["suite"].queryset = in_workspace(EvalSuite.objects.order_by("name"), user)
