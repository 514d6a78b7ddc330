// "Copy as JSON": the whole timeline, as the JSON endpoint serves it, onto the clipboard.
(function () {
  const button = document.getElementById("copy-json");
  const status = document.getElementById("copy-status");
  if (!button) return;

  button.addEventListener("click", async () => {
    const data = JSON.parse(document.getElementById(button.dataset.source).textContent);
    const text = JSON.stringify(data, null, 2);
    const ok = await window.agentryCopy(text);
    status.textContent = ok
      ? interpolate(gettext("copied (%(count)s characters)"), { count: text.length }, true)
      : gettext("copy failed: open the JSON link instead");
  });
})();

// "Fork from here": each step's form shows the fields its chosen change needs (all without script).
(function () {
  const NEEDED_BY = { version: "version", model_config: "model", tool_call_id: "tool_result", result: "tool_result", message: "user_message" };
  document.querySelectorAll("form.fork-fields").forEach((form) => {
    const change = form.querySelector("select[name=change]");
    if (!change) return;
    function show() {
      form.querySelectorAll(".fork-field").forEach((field) => {
        const needed = NEEDED_BY[field.dataset.field];
        field.hidden = Boolean(needed) && needed !== change.value;
      });
    }
    change.addEventListener("change", show);
    show();
  });
})();
