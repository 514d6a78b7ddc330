// Copying onto the clipboard for the operator pages' "Copy" buttons: the Clipboard API where the
// page may use it (a secure context), else a selected hidden textarea and the copy command (an
// operator page served over plain HTTP on a LAN address). Resolves to whether it copied.
window.agentryCopy = async function (text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (error) {
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
};
