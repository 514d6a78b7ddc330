"""The runs changelist at a ledger of millions of runs (bench.scale_ledger: 2.5 million runs at 10
million model calls). Django's changelist reads the whole filtered list three more times besides
the page: an exact COUNT for the paginator, and the date hierarchy's first and last date and its
DISTINCT years (months, days) of every row. At 10 million calls these took 0.5 to 2 s each, the
unfiltered list 4 s. Here each is bounded:

- the count stops at a few pages past the one shown (CappedPaginator): the list says "more
  than N runs" beyond it, and every page stays reachable, the next ones by the page links;
- the date hierarchy lists the periods between the list's first and last date (two reads of
  run_created_idx, or of the index of the filter chosen) instead of the periods that hold a
  run: a year, month or day with no run in between is listed too, and shows an empty list;
- the columns that join other tables (the question, the version number, the end user) are read
  for the page's rows only (RunChangeList), not in the count and the date bounds;
- the rows are drawn without a template per checkbox or a dict of choices per cell (below)."""

from datetime import date, timedelta
from functools import cached_property

from django.contrib.admin import helpers
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.core.paginator import Paginator
from django.db.models import Max, Min
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _

# The count reads this many pages past the one shown: the page links reach as far.
PAGES_AHEAD = 10


def count_cap(request, per_page: int) -> int:
    """The most rows the list counts for the page asked: PAGES_AHEAD pages past it."""
    page = request.GET.get(PAGE_VAR, "1")
    number = int(page) if page.isascii() and page.isdigit() and len(page) < 7 else 1
    return (max(number, 1) + PAGES_AHEAD) * per_page


class CappedPaginator(Paginator):
    """Counts at most `cap` + 1 rows (SELECT count(*) FROM (… LIMIT cap + 1)): past `cap`,
    `capped` is true and the count is not the list's size, only that there are more."""

    def __init__(self, object_list, per_page, orphans=0, allow_empty_first_page=True, *, cap: int):
        super().__init__(object_list, per_page, orphans, allow_empty_first_page)
        self.cap = cap

    @cached_property
    def count(self) -> int:
        # Any cap + 1 rows will do: unordered, the database stops at the first ones it finds.
        return self.object_list.order_by()[: self.cap + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > self.cap


class RunChangeList(ChangeList):
    """The page's rows with the columns that join other tables (RunAdmin.page_rows)."""

    def get_results(self, request):
        super().get_results(request)
        if self.result_count == 0:
            # The count found no row: no page to read. A filter that few runs pass and no index
            # serves (a cost range) would read every run of the ledger a second time for it.
            self.result_list = self.queryset.none()
        else:
            self.result_list = self.model_admin.page_rows(self.result_list)


def periods_between(first: date, last: date, kind: str) -> list[date]:
    """Every year, month or day (`kind`) from `first` to `last`, as the first day of each."""
    if kind == "year":
        return [date(year, 1, 1) for year in range(first.year, last.year + 1)]
    if kind == "month":
        months = range(first.year * 12 + first.month - 1, last.year * 12 + last.month)
        return [date(month // 12, month % 12 + 1, 1) for month in months]
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


class _BoundedDates:
    """The changelist's queryset as Django's date hierarchy reads it, its periods from the
    list's first and last date; no read at all for an empty list."""

    def __init__(self, changelist):
        self.queryset, self.empty = changelist.queryset, changelist.result_count == 0
        self.read = {}

    def aggregate(self, **aggregates):
        # Django's hierarchy asks for the bounds, then for the periods: one read for both.
        key = tuple(sorted(aggregates))
        if key not in self.read:
            self.read[key] = dict.fromkeys(aggregates) if self.empty else self.queryset.aggregate(**aggregates)
        return self.read[key]

    def datetimes(self, field_name: str, kind: str) -> list[date]:
        bounds = self.aggregate(first=Min(field_name), last=Max(field_name))
        if bounds["first"] is None:
            return []
        first, last = (timezone.localtime(bounds[key]).date() for key in ("first", "last"))
        return periods_between(first, last, kind)


class _Hierarchy:
    """The changelist, its queryset read as _BoundedDates."""

    def __init__(self, changelist):
        self._changelist = changelist
        self.queryset = _BoundedDates(changelist)

    def __getattr__(self, name):
        return getattr(self._changelist, name)


def bounded_date_hierarchy(changelist) -> dict | None:
    """Django's date hierarchy of `changelist`, its periods between the first and last date."""
    return date_hierarchy(_Hierarchy(changelist))


# --- the page's rows -----------------------------------------------------------------------------
# Rendering the page's 100 rows cost more than its statements: each row's checkbox went through
# the form renderer's templates, and each choice field's display (get_FOO_display, the admin's
# column of a field with choices) builds a dict of every choice, hashing each lazily translated
# label: a translation per choice per row.


def choice_label(choices, value: str) -> str:
    """The label of `value` among the TextChoices `choices` (the value itself if unknown)."""
    try:
        return str(choices(value).label)
    except ValueError:
        return value


def action_checkbox_html(obj) -> str:
    """The markup of Django's action checkbox for `obj`, without the form renderer."""
    return format_html(
        '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
        helpers.ACTION_CHECKBOX_NAME,
        obj.pk,
        format_html(_("Select this object for an action - {}"), obj.pk),
    )
