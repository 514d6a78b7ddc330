// The agent's page: each "Copy" button puts the text of the element it names (data-copy) on the
// clipboard and says so in its status line, for readers of the screen too (role="status").
(function () {
  document.querySelectorAll("button.copy-button").forEach((button) => {
    button.addEventListener("click", async () => {
      const text = document.getElementById(button.dataset.copy).textContent;
      const status = document.getElementById(button.dataset.copy + "-status");
      const ok = await window.agentryCopy(text);
      if (status) status.textContent = ok ? gettext("copied") : gettext("copy failed: select the text instead");
    });
  });
})();
