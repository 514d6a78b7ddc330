// Django's autocomplete boxes (its Select2 4.0) take their name for a screen reader from the
// chosen item's text: an empty box has none, and its text span claims the role of a text field
// it is not (Select2 4.1 dropped that role). Each box is named by its select's label instead.
(function () {
  function labelOf(select) {
    const label = select.labels && select.labels[0];
    return select.getAttribute("aria-label") || (label ? label.textContent.trim() : "");
  }
  function nameBoxes(root) {
    root.querySelectorAll("select.admin-autocomplete").forEach(function (select) {
      const box = select.nextElementSibling;
      if (!box || !box.classList.contains("select2")) {
        return;
      }
      const selection = box.querySelector(".select2-selection");
      const rendered = box.querySelector(".select2-selection__rendered");
      if (selection && labelOf(select)) {
        selection.setAttribute("aria-label", labelOf(select));
      }
      if (rendered) {
        rendered.removeAttribute("role");
        rendered.removeAttribute("aria-readonly");
      }
    });
  }
  // Django's autocomplete.js builds the boxes in a jQuery ready handler, added before this
  // deferred script runs: one added now runs after it.
  if (window.django && window.django.jQuery) {
    window.django.jQuery(function () { nameBoxes(document); });
  }
  // A row added to an inline: Django's listener (added earlier) has built its boxes by now.
  document.addEventListener("formset:added", function (event) { nameBoxes(event.target); });
})();
