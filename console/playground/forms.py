"""The playground's form: the edited draft (each field the Agent's or the ModelConfig's own form
field, so labels and limits are the admin's) and what to send it."""

from django import forms
from django.utils.translation import gettext_lazy as _

from agents.models import Agent, ModelConfig
from agents.playground import AGENT_FIELDS, MODEL_FIELDS, PlaygroundEdits, workspace_tools
from console.playground.services import past_runs
from evals.models import EvalSuite

# Longer prompts than this are refused before anything is built: a playground run is billed.
PROMPT_MAX_CHARS = 50_000
MESSAGE_MAX_CHARS = 20_000


class PlaygroundForm(forms.Form):
    def __init__(self, *args, agent: Agent, **kwargs):
        super().__init__(*args, **kwargs)
        self.agent = agent
        for name in AGENT_FIELDS:
            self.fields[name] = Agent._meta.get_field(name).formfield()
        prompt = Agent._meta.get_field("system_prompt")
        self.fields["system_prompt"] = forms.CharField(
            required=False,
            strip=False,
            max_length=PROMPT_MAX_CHARS,
            label=prompt.verbose_name,
            help_text=prompt.help_text,
            widget=forms.Textarea(attrs={"rows": 12}),
        )
        # The agent's workspace's model configs only (workspaces/references.py's rule).
        self.fields["model_config"] = forms.ModelChoiceField(
            queryset=ModelConfig.objects.filter(workspace_id=agent.workspace_id).order_by("name"),
            label=Agent._meta.get_field("model_config").verbose_name,
        )
        for name in MODEL_FIELDS:
            self.fields[name] = ModelConfig._meta.get_field(name).formfield(required=False)
        self.fields["tools"] = forms.ModelMultipleChoiceField(
            queryset=workspace_tools(agent=agent),
            required=False,
            label=_("Tools"),
            widget=forms.CheckboxSelectMultiple,
        )
        # The admin's form leaves these empty for "no limit" or "none".
        for name in AGENT_FIELDS:
            field = Agent._meta.get_field(name)
            if field.blank:
                self.fields[name].required = False

    def edits(self) -> PlaygroundEdits:
        """The cleaned form as edits of the agent's saved configuration: the model's parameters
        only where they differ from the chosen config's."""
        data = self.cleaned_data
        config = data["model_config"]
        params = {name: data[name] for name in MODEL_FIELDS if data[name] != getattr(config, name)}
        return PlaygroundEdits(
            agent_fields={name: data[name] for name in AGENT_FIELDS},
            model_config=config,
            model_params=params,
            tools=list(data["tools"]),
        )

    @classmethod
    def initial_for(cls, agent: Agent) -> dict:
        """The agent's saved configuration (its draft) as the form's starting values."""
        initial = {name: getattr(agent, name) for name in AGENT_FIELDS}
        initial["model_config"] = agent.model_config_id
        initial.update({name: getattr(agent.model_config, name) for name in MODEL_FIELDS})
        initial["tools"] = list(
            agent.agent_tools.filter(enabled=True, tool__is_active=True).values_list("tool_id", flat=True)
        )
        return initial


class SendForm(PlaygroundForm):
    """A test message, or a past production run of the agent to send again."""

    def __init__(self, *args, agent: Agent, **kwargs):
        super().__init__(*args, agent=agent, **kwargs)
        self.fields["content"] = forms.CharField(
            required=False,
            max_length=MESSAGE_MAX_CHARS,
            strip=True,
            label=_("Test message"),
            widget=forms.Textarea(attrs={"rows": 3}),
        )
        self.fields["past_run"] = forms.UUIDField(required=False, label=_("Or a past run"))

    def clean_past_run(self):
        run_id = self.cleaned_data["past_run"]
        if run_id is None:
            return None
        found = next((run for run in past_runs(agent=self.agent) if run.pk == run_id), None)
        if found is None:
            raise forms.ValidationError(_("Choose one of this agent's recent runs."), code="invalid_choice")
        return found

    def clean(self):
        data = super().clean()
        if not data.get("content") and not data.get("past_run") and "past_run" not in self.errors:
            raise forms.ValidationError(_("Write a test message, or choose a past run."), code="required")
        return data


class EvalForm(PlaygroundForm):
    def __init__(self, *args, agent: Agent, **kwargs):
        super().__init__(*args, agent=agent, **kwargs)
        self.fields["suite"] = forms.ModelChoiceField(
            queryset=EvalSuite.objects.filter(workspace_id=agent.workspace_id).order_by("name"),
            label=_("Eval suite"),
        )
