// Try an agent: post the message, then poll the run's events until it ends. Each run gets its
// own section (status in words, a link to its timeline and to any approval it waits for, a card
// per tool call, and its raw events folded away), so one message's steps never mix with the next's.
// Files chosen with the attach button, pasted into the message or dropped on the form wait in a
// tray (images as thumbnails, others as chips; each removable) and are uploaded one by one when
// the message is sent, which names them.
(function () {
  const form = document.getElementById("try-form");
  if (!form) return;
  const transcript = document.getElementById("transcript");
  const runs = document.getElementById("try-runs");
  const state = document.getElementById("try-state");
  const sendButton = document.getElementById("try-send");
  const POLL_MS = 400;
  const tray = document.getElementById("try-tray");
  const fileInput = document.getElementById("try-files");
  const maxBytes = Number(form.dataset.maxBytes) || 0;
  const perMessage = Number(form.dataset.perMessage) || 0;
  let pending = [];

  function sizeText(bytes) {
    if (bytes >= 1000 * 1000) return `${(bytes / 1000 / 1000).toFixed(1)} MB`;
    return bytes >= 1000 ? `${Math.round(bytes / 1000)} KB` : `${bytes} B`;
  }

  function isImage(type) {
    return /^image\/(png|jpeg|gif|webp)$/.test(type || "");
  }

  // A file as shown: an image's thumbnail from its object URL, else a chip with name and size.
  function partNode(file, url) {
    if (url) {
      const img = element("img", "attachment-thumb");
      img.src = url;
      img.alt = file.name;
      return img;
    }
    return element("span", "attachment-chip", `${file.name} · ${sizeText(file.size)}`);
  }

  function addFiles(files) {
    for (const file of files) {
      if (perMessage && pending.length >= perMessage) {
        state.textContent = interpolate(gettext("A message may carry at most %(count)s attachments."), { count: perMessage }, true);
        return;
      }
      if (maxBytes && file.size > maxBytes) {
        state.textContent = interpolate(gettext("%(name)s is larger than %(limit)s, the most a file may be."), { name: file.name, limit: sizeText(maxBytes) }, true);
        continue;
      }
      const entry = { file, url: isImage(file.type) ? URL.createObjectURL(file) : null };
      const item = element("div", "item");
      const remove = element("button", "button remove", "×");
      remove.type = "button";
      remove.setAttribute("aria-label", interpolate(gettext("Remove %(name)s"), { name: file.name }, true));
      remove.addEventListener("click", () => {
        pending = pending.filter((other) => other !== entry);
        item.remove();
        form.elements.content.focus();
      });
      item.append(partNode(file, entry.url), remove);
      entry.item = item;
      pending.push(entry);
      tray.append(item);
    }
  }

  function clearTray() {
    pending = [];
    tray.replaceChildren();
  }

  // The waiting files, uploaded in order for this agent and end user: their ids, or an Error
  // with the server's reason.
  async function uploadAll(entries) {
    const ids = [];
    for (const entry of entries) {
      const body = new FormData();
      body.append("csrfmiddlewaretoken", form.elements.csrfmiddlewaretoken.value);
      body.append("agent", form.elements.agent.value);
      body.append("end_user", form.elements.end_user.value);
      body.append("file", entry.file, entry.file.name);
      state.textContent = interpolate(gettext("uploading %(name)s…"), { name: entry.file.name }, true);
      const response = await fetch(form.dataset.attachUrl, { method: "POST", body, credentials: "same-origin" });
      const data = await response.json().catch(() => ({ message: `HTTP ${response.status}` }));
      if (!response.ok) throw new Error(`${entry.file.name}: ${data.message}`);
      ids.push(data.id);
    }
    return ids;
  }

  document.getElementById("try-attach").addEventListener("click", () => fileInput.click());
  fileInput.addEventListener("change", () => {
    addFiles(fileInput.files);
    fileInput.value = "";
  });
  form.elements.content.addEventListener("paste", (event) => {
    const files = event.clipboardData && event.clipboardData.files;
    if (files && files.length) {
      event.preventDefault();
      addFiles(files);
    }
  });
  form.addEventListener("dragover", (event) => {
    if (event.dataTransfer && Array.from(event.dataTransfer.types).includes("Files")) {
      event.preventDefault();
      form.classList.add("dropping");
    }
  });
  form.addEventListener("dragleave", (event) => {
    if (!form.contains(event.relatedTarget)) form.classList.remove("dropping");
  });
  form.addEventListener("drop", (event) => {
    form.classList.remove("dropping");
    if (event.dataTransfer && event.dataTransfer.files.length) {
      event.preventDefault();
      addFiles(event.dataTransfer.files);
    }
  });

  function bubble(role, text) {
    const div = document.createElement("div");
    div.className = `bubble ${role}`;
    div.textContent = text;
    transcript.appendChild(div);
    return div;
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function runSection(run) {
    const section = element("section", "try-run");
    section.dataset.run = run.run_id;
    const heading = element("h3");
    const id = element("span", "short-id", run.run_id.slice(0, 8));
    id.title = run.run_id;
    const status = element("span", "run-status", gettext("queued"));
    const link = element("a", "", gettext("timeline"));
    link.href = run.timeline_url;
    heading.append(gettext("Run") + " ", id, " · ", status, " · ", link);
    const waiting = element("p", "waiting");
    const cards = element("div", "tool-cards");
    const raw = element("details", "raw-events");
    raw.append(element("summary", "", gettext("raw events")));
    const table = element("table", "monitor-table try-events");
    table.createTHead().insertRow().append(element("th", "", gettext("seq")), element("th", "", gettext("type")), element("th", "", gettext("payload")));
    table.createTBody();
    raw.append(table);
    section.append(heading, waiting, cards, raw);
    runs.prepend(section);
    return { section, status, waiting, cards, body: table.tBodies[0], cardsById: new Map() };
  }

  function pretty(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  // A tool call as a card: what was called with what, then its approval and its result or error.
  function showToolCall(view, call) {
    let card = view.cardsById.get(call.id);
    if (!card) {
      card = element("article", "tool-card");
      card.dataset.tool = call.tool;
      view.cardsById.set(call.id, card);
      view.cards.append(card);
    }
    card.dataset.status = call.status;
    const title = element("h4");
    const state = element("span", "state", call.status_text);
    if (call.latency_ms !== null) state.textContent += ` · ${call.latency_ms} ms`;
    title.append(element("span", "", interpolate(gettext("Tool %(tool)s"), call, true)), state);
    const parts = [title, element("small", "", gettext("arguments")), element("pre", "arguments", pretty(call.arguments))];
    if (call.approval) {
      const line = element("p", "approval");
      const label = interpolate(gettext("Approval #%(id)s: %(status)s"), { id: call.approval.id, status: call.approval.status_text }, true);
      if (call.approval.status === "pending" && call.approval.url) {
        const link = element("a", "", label);
        link.href = call.approval.url;
        link.target = "_blank";
        link.rel = "noopener";
        line.append(link);
      } else {
        line.textContent = label;
      }
      parts.push(line);
    }
    if (call.error) {
      parts.push(element("small", "", gettext("error")), element("pre", "error", call.error));
    } else if (call.result) {
      const result = call.result_cut ? `${call.result}…` : call.result;
      parts.push(element("small", "", gettext("result")), element("pre", "result", result));
    }
    card.replaceChildren(...parts);
  }

  function addEventRow(body, event) {
    const row = body.insertRow();
    row.dataset.type = event.type;
    row.insertCell().textContent = event.seq;
    row.insertCell().textContent = event.type;
    const cell = row.insertCell();
    cell.className = "payload";
    cell.appendChild(element("pre", "", JSON.stringify(event.payload)));
  }

  function showWaiting(view, approvals) {
    if (!approvals.length) {
      view.waiting.replaceChildren();
      return;
    }
    const parts = [gettext("Waiting for approval: ")];
    approvals.forEach((approval, index) => {
      if (index) parts.push(", ");
      const label = interpolate(gettext("%(tool)s (approval #%(id)s)"), approval, true);
      if (approval.url) {
        const link = element("a", "", label);
        link.href = approval.url;
        link.target = "_blank";
        link.rel = "noopener";
        parts.push(link);
      } else {
        parts.push(interpolate(gettext("%(label)s, for an approver to decide"), { label }, true));
      }
    });
    view.waiting.replaceChildren(...parts);
  }

  async function follow(run) {
    const view = runSection(run);
    let after = 0;
    let streamed = "";
    const answer = bubble("assistant pending", "…");
    const note = bubble("note", "");
    for (;;) {
      const response = await fetch(`${run.events_url}?after=${after}`, { credentials: "same-origin" });
      if (!response.ok) {
        state.textContent = interpolate(gettext("polling failed: HTTP %(status)s"), response, true);
        return;
      }
      const data = await response.json();
      for (const event of data.events) {
        after = event.seq;
        addEventRow(view.body, event);
        if (event.type === "message.delta") {
          streamed += event.payload.text;
          answer.textContent = streamed;
        } else if (event.type === "tool.started") {
          note.textContent = interpolate(gettext("calling %(tool)s %(arguments)s"), { tool: event.payload.tool, arguments: JSON.stringify(event.payload.arguments) }, true);
        } else if (event.type === "approval.requested") {
          note.textContent = interpolate(gettext("waiting for approval of %(tool)s"), event.payload, true);
        } else if (event.type === "llm_call.completed") {
          streamed = "";
        }
      }
      const words = data.run.stop_reason_text
        ? `${data.run.status_text} (${data.run.stop_reason_text})`
        : data.run.status_text;
      view.status.textContent = words;
      view.section.dataset.status = data.run.status;
      state.textContent = words;
      showWaiting(view, data.pending_approvals);
      data.tool_calls.forEach((call) => showToolCall(view, call));
      if (data.run.terminal) {
        answer.classList.remove("pending");
        answer.textContent = data.answer || data.run.error || interpolate(gettext("(run %(status)s)"), { status: data.run.status_text }, true);
        note.textContent = interpolate(gettext("run %(words)s · %(tokens)s tokens"), { words, tokens: data.run.total_tokens }, true);
        return;
      }
      if (data.events.length === 0) await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }

  // A conversation is with one agent and one end user: choosing another starts a new one.
  function restart() {
    form.elements.conversation.value = "";
    transcript.replaceChildren();
    clearTray(); // uploaded for the other agent or end user: not theirs to send
  }
  form.elements.agent.addEventListener("change", restart);
  form.elements.end_user.addEventListener("change", restart);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = new FormData(form);
    const entries = pending.slice();
    sendButton.disabled = true;
    try {
      for (const id of await uploadAll(entries)) body.append("attachments", id);
      state.textContent = gettext("sending…");
      const response = await fetch(form.action, { method: "POST", body, credentials: "same-origin" });
      const data = await response.json();
      if (!response.ok) {
        state.textContent = data.message;
        return;
      }
      if (entries.length) {
        const parts = element("div", "attachment-parts user");
        entries.forEach((entry) => parts.append(partNode(entry.file, entry.url)));
        transcript.appendChild(parts);
        pending = pending.filter((entry) => !entries.includes(entry));
        entries.forEach((entry) => entry.item.remove());
      }
      if (body.get("content")) bubble("user", body.get("content"));
      form.elements.conversation.value = data.conversation_id;
      form.elements.content.value = "";
      await follow(data);
    } catch (error) {
      state.textContent = interpolate(gettext("error: %(message)s"), { message: error.message }, true);
    } finally {
      sendButton.disabled = false;
    }
  });
  // The button ships disabled: the script is deferred, and a send before it runs would be a plain
  // form post that shows raw JSON instead of the run.
  sendButton.disabled = false;
})();
