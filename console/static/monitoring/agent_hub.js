// The agent's page: each "Copy" button puts the text of the element it names (data-copy) on the
// clipboard and says so in its status line, for readers of the screen too (role="status").
(function () {
  function copyWithSelection(text) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }

  document.querySelectorAll("button.copy-button").forEach((button) => {
    button.addEventListener("click", async () => {
      const text = document.getElementById(button.dataset.copy).textContent;
      const status = document.getElementById(button.dataset.copy + "-status");
      let ok = false;
      try {
        await navigator.clipboard.writeText(text);
        ok = true;
      } catch (error) {
        ok = copyWithSelection(text);
      }
      if (status) status.textContent = ok ? gettext("copied") : gettext("copy failed: select the text instead");
    });
  });
})();
