from django import forms
from django.utils.translation import gettext_lazy as _

from agents.models import Agent
from agents.selectors import agents_usable_by


class TryAgentForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.none())
    content = forms.CharField(
        max_length=20000, label=_("Message"), widget=forms.Textarea(attrs={"rows": 3, "cols": 80})
    )
    conversation = forms.UUIDField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        # The same agents the user could reach through the API: group restrictions hold here too.
        self.fields["agent"].queryset = agents_usable_by(user=user).order_by("name")
