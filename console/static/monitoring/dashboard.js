// Refreshes the dashboard's panel in place every few seconds while the tab is visible.
(function () {
  const root = document.getElementById("monitor");
  if (!root) return;
  const every = (Number(root.dataset.refreshSeconds) || 10) * 1000;
  const CONTROLS = "a[href], button, input, select, textarea, summary, [tabindex]";

  // Where focus is in the panel: its control's id, link and position, so that a keyboard user
  // keeps their place when the panel is replaced (else focus falls back to the page's top).
  function focusPlace() {
    const focused = document.activeElement;
    if (!focused || focused === root || !root.contains(focused)) return null;
    const controls = [...root.querySelectorAll(CONTROLS)];
    return { id: focused.id, href: focused.getAttribute("href"), index: controls.indexOf(focused) };
  }

  function focusAgain(place) {
    const controls = [...root.querySelectorAll(CONTROLS)];
    const again = (place.id && controls.find((control) => control.id === place.id))
      || (place.href && controls.find((control) => control.getAttribute("href") === place.href))
      || controls[Math.min(Math.max(place.index, 0), controls.length - 1)];
    if (again) again.focus({ preventScroll: true });
  }

  async function refresh() {
    if (document.hidden) return;
    try {
      const response = await fetch(root.dataset.panelUrl, { credentials: "same-origin" });
      if (response.redirected) {
        window.location.reload(); // the session ended: let the login page take over
        return;
      }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const text = await response.text();
      const place = focusPlace();
      root.innerHTML = text;
      if (place) focusAgain(place);
      root.classList.remove("refresh-failed");
      root.dataset.refreshedAt = new Date().toISOString();
    } catch (error) {
      root.classList.add("refresh-failed");
      root.title = interpolate(gettext("last refresh failed: %(message)s"), error, true);
    }
  }
  setInterval(refresh, every);
})();
