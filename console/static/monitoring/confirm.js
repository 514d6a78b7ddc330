// Buttons that change a run ask first (delegated, so forms swapped in by a refresh ask too).
document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
});
