// The approval queue: keeps itself current by polling, shows ages and deadlines, and checks
// edited arguments (JSON, schema, difference) while they are typed. No build step.
(function () {
  "use strict";
  const csrf = () => document.querySelector('meta[name="csrf-token"]').content;

  // The words come from the page's catalogue (jsi18n, loaded before this script).
  const say = (text, values) => interpolate(text, values, true);

  function duration(seconds) {
    const s = Math.max(0, Math.round(Math.abs(seconds)));
    if (s < 60) return say(gettext("%(s)s s"), { s });
    if (s < 3600) return say(gettext("%(m)s min"), { m: Math.floor(s / 60) });
    if (s < 86400) return say(gettext("%(h)s h %(m)s min"), { h: Math.floor(s / 3600), m: Math.floor((s % 3600) / 60) });
    return say(gettext("%(d)s d %(h)s h"), { d: Math.floor(s / 86400), h: Math.floor((s % 86400) / 3600) });
  }

  function tickTimes(root) {
    const now = Date.now();
    root.querySelectorAll("time[data-created]").forEach((el) => {
      el.textContent = say(gettext("waiting %(since)s"), { since: duration((now - Date.parse(el.dataset.created)) / 1000) });
    });
    root.querySelectorAll("time[data-expires]").forEach((el) => {
      const left = (Date.parse(el.dataset.expires) - now) / 1000;
      el.textContent = left > 0 ? say(gettext("%(left)s left"), { left: duration(left) }) : gettext("expiring now");
      el.classList.toggle("soon", left < 300);
    });
  }

  function renderDiff(box, diff) {
    box.replaceChildren(...diff.map(([kind, line]) => {
      const span = document.createElement("span");
      span.className = kind;
      span.textContent = (kind === "added" ? "+ " : kind === "removed" ? "- " : "  ") + line;
      return span;
    }));
    box.hidden = !diff.some(([kind]) => kind !== "same");
  }

  function watchEdits(root) {
    root.querySelectorAll("form[data-preview-url]").forEach((form) => {
      if (form.dataset.watched) return;
      form.dataset.watched = "1";
      const area = form.querySelector("textarea[name=arguments]");
      const errors = form.querySelector(".errors");
      const diffBox = form.querySelector(".diff");
      const submit = form.querySelector("button[type=submit]");
      let timer = null;
      const check = async () => {
        const response = await fetch(form.dataset.previewUrl, {
          method: "POST", body: area.value, credentials: "same-origin",
          headers: { "X-CSRFToken": csrf(), "Content-Type": "application/json" },
        });
        // 400: the text is not usable JSON; the body still says why.
        if (!response.ok && response.status !== 400) return;
        const result = await response.json();
        errors.replaceChildren(...result.errors.map((text) => {
          const li = document.createElement("li");
          li.textContent = text;
          return li;
        }));
        errors.hidden = result.errors.length === 0;
        renderDiff(diffBox, result.diff);
        submit.disabled = !result.ok;
      };
      area.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(check, 250); });
    });
  }

  function fromHtml(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  async function poll(list) {
    let data;
    try {
      const response = await fetch(list.dataset.pollUrl + window.location.search, {
        credentials: "same-origin", headers: { Accept: "application/json" },
      });
      if (!response.ok) return;
      data = await response.json();
    } catch (error) {
      return; // offline for a moment: the next round tries again
    }
    const wanted = new Set(data.cards.map((card) => String(card.id)));
    list.querySelectorAll("[data-approval-id]").forEach((node) => {
      if (!wanted.has(node.dataset.approvalId)) node.remove();
    });
    // Cards already on the page are kept as they are, so nothing a person is typing is lost.
    let previous = null;
    for (const card of data.cards) {
      let node = list.querySelector('[data-approval-id="' + card.id + '"]');
      if (!node) {
        node = fromHtml(card.html);
        node.classList.add("new");
      }
      const anchor = previous ? previous.nextElementSibling : list.firstElementChild;
      if (node !== anchor) list.insertBefore(node, anchor);
      previous = node;
    }
    document.getElementById("pending-count").textContent = data.count;
    document.getElementById("empty-note").hidden = data.count > 0;
    document.title = document.title.replace(/^\(\d+\)/, "(" + data.count + ")");
    watchEdits(list);
    tickTimes(list);
  }

  document.addEventListener("DOMContentLoaded", () => {
    watchEdits(document);
    tickTimes(document);
    setInterval(() => tickTimes(document), 1000);
    const list = document.getElementById("approval-list");
    if (list) {
      const seconds = parseFloat(list.dataset.pollSeconds) || 5;
      setInterval(() => poll(list), seconds * 1000);
    }
  });
})();
