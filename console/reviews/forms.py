"""The forms of a review: the rubric's labels with the verdict and the corrected answer, and the
eval case made of the reviewed run."""

from django import forms
from django.utils.translation import gettext_lazy as _

from evals.models import EvalSuite
from platform_site.admin_mixins import CheckedJSONFormField
from reviews.models import ReviewLabel
from reviews.services import AnswerCheck
from workspaces.access import in_workspace

TEXT_MAX = 20_000


def _no_nul(value: str) -> str:
    # PostgreSQL stores NUL in no text column: refused here, not failed on insert.
    if "\x00" in value:
        raise forms.ValidationError(_("Must not contain the NUL character (U+0000)."))
    return value


class LabelForm(forms.Form):
    """The verdict, a choice per rubric label (fields `label_<n>`), the corrected answer, notes."""

    verdict = forms.ChoiceField(choices=ReviewLabel.Verdict.choices, widget=forms.RadioSelect, label=_("Verdict"))
    corrected_answer = forms.CharField(
        required=False,
        max_length=TEXT_MAX,
        widget=forms.Textarea(attrs={"rows": 6}),
        label=_("Corrected answer"),
        help_text=_("What the agent should have answered (for a bad answer)."),
    )
    notes = forms.CharField(
        required=False, max_length=TEXT_MAX, widget=forms.Textarea(attrs={"rows": 3}), label=_("Notes")
    )

    def __init__(self, *args, rubric: list, **kwargs):
        super().__init__(*args, **kwargs)
        self.rubric = rubric
        for number, label in enumerate(rubric):
            self.fields[f"label_{number}"] = forms.ChoiceField(
                required=False, label=label["name"], choices=[("", "—"), *[(c, c) for c in label["choices"]]]
            )

    def clean_corrected_answer(self):
        return _no_nul(self.cleaned_data["corrected_answer"])

    def clean_notes(self):
        return _no_nul(self.cleaned_data["notes"])

    def labels(self) -> dict:
        return {
            label["name"]: self.cleaned_data[f"label_{number}"]
            for number, label in enumerate(self.rubric)
            if self.cleaned_data.get(f"label_{number}")
        }


class CaseForm(forms.Form):
    suite = forms.ModelChoiceField(queryset=EvalSuite.objects.none(), label=_("Suite"))
    name = forms.CharField(max_length=100, label=_("Case name"))
    corrected_answer = forms.CharField(
        max_length=TEXT_MAX, widget=forms.Textarea(attrs={"rows": 4}), label=_("Expected answer")
    )
    check = forms.ChoiceField(
        label=_("Answer check"),
        initial=AnswerCheck.AUTO,
        choices=[
            (AnswerCheck.AUTO, _("the suite's judge model if it has one, otherwise the exact text")),
            (AnswerCheck.JUDGE, _("the suite's judge model compares it with the expected answer")),
            (AnswerCheck.EQUALS, _("the exact text")),
            (AnswerCheck.CONTAINS, _("contains the text (at most 500 characters)")),
        ],
    )
    expected_tool_calls = CheckedJSONFormField(
        required=False,
        label=_("Expected tool calls"),
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text=_('[{"name": "…", "arguments": {subset}}, …]: the run\'s calls; edit them, or [] for none expected.'),
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        # The suites of the workspace the user acts in.
        self.fields["suite"].queryset = in_workspace(EvalSuite.objects.order_by("name"), user)

    def clean_name(self):
        return _no_nul(self.cleaned_data["name"])

    def clean_corrected_answer(self):
        return _no_nul(self.cleaned_data["corrected_answer"])
