"""The "Fork from here" form of a run's timeline: one per step of a run that ended, each naming
what the fork changes (ForkChange) and the fields that change needs. It validates what was typed
and turns it into an engine.forks.ForkRequest; run_fork checks the rest against the run."""

from dataclasses import dataclass

from django import forms
from django.utils.translation import gettext_lazy as _

from agents.models import AgentVersion, ModelConfig
from agents.releases import DRAFT, PUBLISHED
from conversations.models import ForkChange, LLMCall, Run, ToolInvocation
from engine.forks import ForkRequest
from platform_site.json_input import JSONInputError, json_loads_checked

TEXT_MAX_CHARS = 20_000
# A result stands for what a tool could return: as long as a big page of text.
RESULT_MAX_CHARS = 100_000
WRITE_RESULTS_MAX = 50


@dataclass(frozen=True)
class ForkChoices:
    """What the forms of one run offer, read once for all its steps."""

    versions: list[tuple[str, str]]
    models: list[tuple[int, str]]


def fork_choices(*, run: Run) -> ForkChoices:
    numbers = (
        AgentVersion.objects.filter(agent_id=run.agent_id, playground=False)
        .order_by("-number")
        .values_list("number", flat=True)
    )
    # The run's workspace's model configs: a fork bills a key of its own workspace.
    configs = (
        ModelConfig.objects.filter(workspace=run.agent.workspace_id).order_by("name").values_list("pk", "name", "model")
    )
    return ForkChoices(
        versions=[(DRAFT, _("draft")), (PUBLISHED, _("published"))] + [(str(n), f"v{n}") for n in numbers],
        models=[(pk, f"{name} ({model})") for pk, name, model in configs],
    )


class ForkForm(forms.Form):
    change = forms.ChoiceField(label=_("Change"))
    version = forms.ChoiceField(required=False, label=_("Version"))
    model_config = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label=_("Model config"))
    tool_call_id = forms.ChoiceField(required=False, label=_("Tool call"))
    result = forms.CharField(
        required=False,
        strip=False,
        max_length=RESULT_MAX_CHARS,
        label=_("Its result instead"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
    )
    message = forms.CharField(
        required=False,
        max_length=TEXT_MAX_CHARS,
        label=_("User message instead"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
    )
    write_results = forms.CharField(
        required=False,
        max_length=RESULT_MAX_CHARS,
        label=_("Write results"),
        help_text=_(
            'Optional, as JSON: {"tool name": "result text"}. What a write tool returns in the fork when '
            "its source made no such call."
        ),
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
    )
    real_writes = forms.BooleanField(required=False, label=_("Let write tools run for real after an approval"))

    def __init__(self, data=None, *, step: int, choices: ForkChoices, tool_calls: list[tuple[str, str]]):
        # Each step's form has its own element ids; the field names stay plain.
        super().__init__(data, auto_id=f"fork-{step}-%s")
        self.step = step
        self.fields["change"].choices = [
            (kind.value, kind.label)
            for kind in ForkChange
            if (kind != ForkChange.USER_MESSAGE or step == 1) and (kind != ForkChange.TOOL_RESULT or tool_calls)
        ]
        self.fields["version"].choices = [("", "–"), *choices.versions]
        self.fields["model_config"].choices = [("", "–"), *choices.models]
        self.fields["tool_call_id"].choices = [("", "–"), *tool_calls]
        if step != 1:
            del self.fields["message"]
        if not tool_calls:
            del self.fields["tool_call_id"], self.fields["result"]

    def clean_write_results(self) -> dict:
        text = self.cleaned_data["write_results"].strip()
        if not text:
            return {}
        try:
            # The platform's JSON reading: bounded nesting, no lone surrogate escapes.
            results = json_loads_checked(text)
        except JSONInputError:
            raise forms.ValidationError(_("Write results must be JSON.")) from None
        if not isinstance(results, dict) or not all(
            isinstance(name, str) and name and isinstance(value, str) for name, value in results.items()
        ):
            raise forms.ValidationError(_('Write results must map tool names to result texts: {"tool": "text"}.'))
        if len(results) > WRITE_RESULTS_MAX:
            raise forms.ValidationError(_("At most %(count)s write results.") % {"count": WRITE_RESULTS_MAX})
        if any("\x00" in name or "\x00" in value for name, value in results.items()):
            raise forms.ValidationError(_("Write results may not hold NUL characters or lone surrogates."))
        return results

    def clean(self):
        data = super().clean()
        change = data.get("change")
        needed = {
            ForkChange.VERSION: ("version", _("Choose the version the fork runs.")),
            ForkChange.MODEL: ("model_config", _("Choose the model config the fork runs.")),
            ForkChange.TOOL_RESULT: ("tool_call_id", _("Choose the tool call whose result changes.")),
            ForkChange.USER_MESSAGE: ("message", _("Write the user message the fork starts from.")),
        }
        if change in needed:
            name, message = needed[change]
            if name in self.fields and not data.get(name) and name not in self.errors:
                self.add_error(name, message)
        return data

    def fork_request(self) -> ForkRequest:
        data = self.cleaned_data
        change = data["change"]
        version = data.get("version") or None
        return ForkRequest(
            step=self.step,
            change=change,
            version=int(version) if change == ForkChange.VERSION and version and version.isdigit() else version,
            model_config_id=data.get("model_config"),
            tool_call_id=data.get("tool_call_id", "") if change == ForkChange.TOOL_RESULT else "",
            result=data.get("result", "") if change == ForkChange.TOOL_RESULT else "",
            message=data.get("message", "") if change == ForkChange.USER_MESSAGE else "",
            write_results=data["write_results"],
            real_writes=data["real_writes"],
        )


def _call_label(tool: str, tool_call_id: str) -> str:
    return f"{tool} ({tool_call_id})"


def step_tool_calls(*, run: Run, step: int) -> list[tuple[str, str]]:
    """The tool calls step `step` of `run` made, as the form's choices."""
    rows = (
        ToolInvocation.objects.filter(run=run, llm_call__purpose=LLMCall.Purpose.STEP, llm_call__iteration=step)
        .order_by("llm_call_id", "position")
        .values_list("tool_call_id", "tool_name")
    )
    return [(call_id, _call_label(tool, call_id)) for call_id, tool in rows]


def fork_forms(*, steps: list[dict], choices: ForkChoices, bound: ForkForm | None = None) -> dict[int, ForkForm]:
    """A form per step of the timeline export's `steps`, keyed by the id of the model call whose
    row shows it (the step's last attempt). A step is offered once its model answered (step 1
    always: its user message can change); `bound` replaces its step's form (with its errors)."""
    carriers: dict[int, int] = {}
    answered = {1}
    tool_calls: dict[int, list] = {}
    for item in steps:
        if item["kind"] == "llm_call" and item["purpose"] == LLMCall.Purpose.STEP:
            carriers[item["iteration"]] = item["id"]
            if item["status"] == LLMCall.Status.SUCCEEDED:
                answered.add(item["iteration"])
        elif item["kind"] == "tool_invocation":
            choice = (item["tool_call_id"], _call_label(item["tool"], item["tool_call_id"]))
            tool_calls.setdefault(item["llm_call_id"], []).append(choice)
    forms_by_call = {}
    for iteration, call_id in carriers.items():
        if bound is not None and bound.step == iteration:
            forms_by_call[call_id] = bound
        elif iteration in answered:
            forms_by_call[call_id] = ForkForm(step=iteration, choices=choices, tool_calls=tool_calls.get(call_id, []))
    return forms_by_call
