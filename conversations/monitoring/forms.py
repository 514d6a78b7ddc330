from django import forms

from agents.models import Agent


class TryAgentForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.filter(is_active=True).order_by("name"))
    content = forms.CharField(max_length=20000, label="Message", widget=forms.Textarea(attrs={"rows": 3, "cols": 80}))
    conversation = forms.UUIDField(required=False, widget=forms.HiddenInput)
