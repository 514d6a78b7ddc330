from django import forms
from django.utils.translation import gettext_lazy as _

from agents.models import Agent
from agents.releases import DRAFT, PUBLISHED, TEST_VERSION_PERMISSION
from agents.selectors import agents_usable_by
from conversations.end_users import END_USER_MAX_CHARS, EndUserInvalid, end_user_clean
from evals.models import EvalSuite


class TryAgentForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), label=_("Agent"))
    content = forms.CharField(
        max_length=20000, label=_("Message"), widget=forms.Textarea(attrs={"rows": 3, "cols": 80})
    )
    conversation = forms.UUIDField(required=False, widget=forms.HiddenInput)
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
        self.fields["agent"].queryset = agents_usable_by(user=user).order_by("name")

    def clean_end_user(self) -> str:
        try:
            return end_user_clean(self.cleaned_data["end_user"])
        except EndUserInvalid as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_version(self) -> str | int | None:
        version = self.cleaned_data["version"].strip()
        if not version:
            return None
        if not self.user.has_perm(TEST_VERSION_PERMISSION):
            raise forms.ValidationError(_("Choosing a version takes the permission to test agent versions."))
        if version in (DRAFT, PUBLISHED):
            return version
        if version.isascii() and version.isdigit() and 0 < int(version) < 2**31:
            return int(version)
        raise forms.ValidationError(_('Must be "draft", "published" or a version number.'))


class EvalCaseFromRunForm(forms.Form):
    suite = forms.ModelChoiceField(queryset=EvalSuite.objects.order_by("name"), label=_("Suite"))
    name = forms.CharField(max_length=100, label=_("Case name"))
