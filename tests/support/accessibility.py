"""Accessibility checks for a page open in Playwright: axe-core's WCAG 2 A/AA rules, plus what
axe does not try (it reads the page as it stands and presses no key): Tab through the page,
no horizontal scrolling at a laptop's width, a name on every control.

`page_problems(page)` runs them all and returns one line per problem, so that a test can print
every problem of a page at once; each check is also usable on its own.

axe-core's script comes from the axe-playwright-python package (requirements-dev.txt), which
ships axe.min.js (MPL-2.0): nothing is downloaded while the tests run, and the version is the
pinned package's."""

from importlib import resources

AXE_SCRIPT = resources.files("axe_playwright_python").joinpath("axe.min.js")
# WCAG 2.0 and 2.1 at levels A and AA: the rules a public-sector audit asks for. axe's
# "best-practice" rules (landmarks, one h1) are left out on purpose: they are advice, not WCAG.
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# Rules switched off, each with the reason. Keep it empty where a fix in our templates can be made.
DISABLED_RULES: dict[str, str] = {}

LAPTOP = {"width": 1366, "height": 768}


def axe_violations(page, *, disabled: dict[str, str] | None = None) -> list[str]:
    """axe-core's WCAG 2 A/AA violations on the page as it is now: one line per element, with the
    rule, its impact, the element's selector and the rule's help page."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_SCRIPT.read_text(encoding="utf-8"))
    rules = {rule: {"enabled": False} for rule in {**DISABLED_RULES, **(disabled or {})}}
    options = {"runOnly": {"type": "tag", "values": WCAG_TAGS}, "resultTypes": ["violations"], "rules": rules}
    violations = page.evaluate("options => axe.run(document, options).then(r => r.violations)", options)
    lines = []
    for violation in violations:
        for node in violation["nodes"]:
            target = " ".join(" >>> ".join(part) if isinstance(part, list) else part for part in node["target"])
            lines.append(
                f"axe {violation['id']} ({violation['impact']}): {target} — {violation['help']} {violation['helpUrl']}"
            )
    return lines


# The elements a Tab press should reach, in the order it should reach them (positive tabindex
# first, then document order), each marked with data-a11y-stop so the walk can name what has focus.
_TABBABLE_JS = """
() => {
  const selector = 'a[href], area[href], button, input, select, textarea, iframe, summary, '
    + '[tabindex], [contenteditable=""], [contenteditable="true"]';
  const visible = el => el.getClientRects().length > 0
    && el.checkVisibility({visibilityProperty: true});
  const radioSeen = new Set();
  const stops = [];
  for (const el of document.querySelectorAll(selector)) {
    if (el.disabled || el.closest('[inert]') || !visible(el)) continue;
    if (el.matches('input[type=hidden]')) continue;
    if (el.tabIndex < 0) continue;
    if (el.matches('summary') && el.parentElement.tagName !== 'DETAILS') continue;
    const closed = el.closest('details:not([open])');
    if (closed && !(el.matches('summary') && el.parentElement === closed)) continue;
    if (el.matches('input[type=radio]') && el.name) {
      // A radio group is one Tab stop: its checked radio, or its first one.
      const key = (el.form ? 'form' : 'doc') + ':' + el.name;
      if (radioSeen.has(key)) continue;
      const group = [...document.querySelectorAll(`input[type=radio][name="${CSS.escape(el.name)}"]`)]
        .filter(r => r.form === el.form && !r.disabled && visible(r));
      radioSeen.add(key);
      const chosen = group.find(r => r.checked) || group[0];
      if (chosen !== el) { stops.push(chosen); continue; }
    }
    stops.push(el);
  }
  const positive = stops.filter(el => el.tabIndex > 0).sort((a, b) => a.tabIndex - b.tabIndex);
  const ordered = [...positive, ...stops.filter(el => el.tabIndex === 0)];
  ordered.forEach((el, i) => el.setAttribute('data-a11y-stop', String(i)));
  return ordered.length;
}
"""

# What has focus now: its stop number (or null), a short description, and whether a focus
# indicator shows (an outline or a box shadow on it, as our CSS and the browser draw them).
_FOCUSED_JS = """
() => {
  const el = document.activeElement;
  if (!el || el === document.body || el === document.documentElement) return null;
  const style = getComputedStyle(el);
  const outline = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0;
  const shadow = style.boxShadow !== 'none';
  let name = el.tagName.toLowerCase();
  if (el.id) name += '#' + el.id;
  else if (el.getAttribute('name')) name += `[name="${el.getAttribute('name')}"]`;
  else if (el.getAttribute('href')) name += `[href="${el.getAttribute('href')}"]`;
  const text = (el.innerText || el.value || el.getAttribute('aria-label') || '').trim().slice(0, 40);
  if (text) name += ` "${text}"`;
  return {stop: el.getAttribute('data-a11y-stop'), name, visible: outline || shadow};
}
"""


def keyboard_problems(page) -> list[str]:
    """Tab from the top of the page to its end: every control is reached, in order, each shows
    where focus is, and focus leaves the page at the end (nothing holds it)."""
    # The page's timers are stopped first: a refresh while Tab is pressed (the dashboard's panel
    # every 10 s) would replace the controls being counted. A timer's id is above all earlier ones.
    page.evaluate(
        "() => { const last = setTimeout(() => {}, 0); for (let id = 1; id <= last; id++) {"
        " clearTimeout(id); clearInterval(id); } }"
    )
    count = page.evaluate(_TABBABLE_JS)
    page.evaluate("() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); }")
    problems = []
    reached: list[int] = []
    previous = None
    # Extra presses past the stops found: a scrolling box Chromium makes focusable, say.
    for _ in range(count + 25):
        page.keyboard.press("Tab")
        focused = page.evaluate(_FOCUSED_JS)
        if focused is None:
            break
        if previous is not None and focused["name"] == previous["name"] and focused["stop"] == previous["stop"]:
            problems.append(f"keyboard: focus stays on {focused['name']} when Tab is pressed")
            break
        if not focused["visible"]:
            problems.append(f"keyboard: no visible focus indicator on {focused['name']}")
        if focused["stop"] is not None:
            reached.append(int(focused["stop"]))
        previous = focused
    else:
        problems.append(
            f"keyboard: focus never leaves the page after {count + 25} Tab presses (last on {previous['name']})"
        )
    if reached != sorted(reached):
        first = next(i for i in range(1, len(reached)) if reached[i] < reached[i - 1])
        problems.append(
            f"keyboard: Tab order differs from the page's order at stop {reached[first]} (after {reached[first - 1]})"
        )
    missed = sorted(set(range(count)) - set(reached))
    if missed:
        names = page.evaluate(
            'stops => stops.map(i => { const el = document.querySelector(`[data-a11y-stop="${i}"]`);'
            " return el.outerHTML.slice(0, 120); })",
            missed[:5],
        )
        problems.append(f"keyboard: {len(missed)} control(s) never get focus with Tab, e.g. {names}")
    return problems


_OVERFLOW_JS = """
() => {
  const width = window.innerWidth;
  const scroll = document.scrollingElement.scrollWidth;
  if (scroll <= width) return null;
  let widest = null, right = width;
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (box.width && box.right + window.scrollX > right) { right = box.right + window.scrollX; widest = el; }
  }
  const describe = el => el ? el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (el.classList.length ? '.' + [...el.classList].join('.') : '') : 'unknown';
  return {scroll, width, widest: describe(widest), right: Math.round(right)};
}
"""


def overflow_problems(page) -> list[str]:
    """The page scrolls sideways at the window's width: name the element reaching furthest right."""
    overflow = page.evaluate(_OVERFLOW_JS)
    if overflow is None:
        return []
    return [
        f"overflow: the page is {overflow['scroll']} px wide in a {overflow['width']} px window; "
        f"widest: {overflow['widest']} (to {overflow['right']} px)"
    ]


# A control's accessible name as the accessibility tree computes it, in the cases our pages use:
# aria-labelledby, aria-label, a <label>, its text or value (buttons, links), an image's alt, a title.
_UNNAMED_JS = """
() => {
  const text = el => (el.innerText || el.textContent || '').trim();
  const nameOf = el => {
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const t = by.split(/\\s+/).map(id => document.getElementById(id)).filter(Boolean).map(text).join(' ');
      if (t.trim()) return t;
    }
    if ((el.getAttribute('aria-label') || '').trim()) return el.getAttribute('aria-label');
    // A label's name is its text, or the alt text of its image (the admin's search box).
    const labelled = l => text(l) || [...l.querySelectorAll('img[alt]')].some(img => img.alt.trim());
    if (el.labels && [...el.labels].some(labelled)) return 'label';
    if (el.matches('button, a, summary, [role=button], [role=link], [role=tab]')) {
      if (text(el)) return text(el);
      const img = el.querySelector('img[alt]:not([alt=""]), svg[aria-label], [aria-label]');
      if (img) return 'image';
    }
    if (el.matches('input[type=submit], input[type=button], input[type=reset]') && el.value.trim()) return el.value;
    if (el.matches('input[type=image]') && (el.alt || '').trim()) return el.alt;
    if ((el.getAttribute('title') || '').trim()) return el.title;
    return '';
  };
  const controls = document.querySelectorAll(
    'input:not([type=hidden]), select, textarea, button, a[href], summary, [role=button], [role=link], [role=tab]');
  const unnamed = [];
  for (const el of controls) {
    if (el.getClientRects().length === 0 || el.closest('[aria-hidden=true]')) continue;
    if (!nameOf(el)) unnamed.push(el.outerHTML.slice(0, 160));
  }
  return unnamed;
}
"""


def unnamed_controls(page) -> list[str]:
    """Controls a screen reader would announce with no name (a bare input, an icon-only button)."""
    return [f"name: control without an accessible name: {html}" for html in page.evaluate(_UNNAMED_JS)]


def page_problems(page, *, disabled: dict[str, str] | None = None) -> list[str]:
    """Every accessibility problem of the page open in `page`: axe's, then the hand-written ones.
    The keyboard walk goes last: it marks the elements it visits and moves focus."""
    problems = axe_violations(page, disabled=disabled) + unnamed_controls(page) + overflow_problems(page)
    return problems + keyboard_problems(page)
