// The tool form's kind-specific sections start folded: the section of the kind chosen opens, on
// load and whenever the kind changes (each section's fieldset carries the class kind-<kind>).
// A file of its own, not an inline script, so the admin's Content-Security-Policy allows it.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const kind = document.getElementById("id_kind");
  if (!kind) {
    return;
  }
  const open = () => {
    const details = document.querySelector(`fieldset.kind-${kind.value} details`);
    if (details) {
      details.open = true;
    }
  };
  kind.addEventListener("change", open);
  open();
});
