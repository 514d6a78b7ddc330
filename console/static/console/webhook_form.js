// The webhook form: each secret's fieldset shows only for the formats that use it (the server
// renders the right ones for the saved or posted format; this follows a change of format).
document.addEventListener("DOMContentLoaded", () => {
  const format = document.getElementById("id_format");
  if (!format) return;
  const follow = () => {
    for (const fieldset of document.querySelectorAll("fieldset.webhook-secret")) {
      fieldset.classList.toggle("hidden", !fieldset.classList.contains(`formats-${format.value}`));
    }
  };
  format.addEventListener("change", follow);
  follow();
});
