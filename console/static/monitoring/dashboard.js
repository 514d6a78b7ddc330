// Refreshes the dashboard's panel in place every few seconds while the tab is visible.
(function () {
  const root = document.getElementById("monitor");
  if (!root) return;
  const every = (Number(root.dataset.refreshSeconds) || 10) * 1000;

  async function refresh() {
    if (document.hidden) return;
    try {
      const response = await fetch(root.dataset.panelUrl, { credentials: "same-origin" });
      if (response.redirected) {
        window.location.reload(); // the session ended: let the login page take over
        return;
      }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      root.innerHTML = await response.text();
      root.classList.remove("refresh-failed");
      root.dataset.refreshedAt = new Date().toISOString();
    } catch (error) {
      root.classList.add("refresh-failed");
      root.title = interpolate(gettext("last refresh failed: %(message)s"), error, true);
    }
  }
  setInterval(refresh, every);
})();
