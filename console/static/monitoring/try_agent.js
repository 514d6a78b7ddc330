// Try an agent: post the message, then poll the run's events until it ends. Each run gets its
// own section (status in words, a link to its timeline and to any approval it waits for, a card
// per tool call, and its raw events folded away), so one message's steps never mix with the next's.
(function () {
  const form = document.getElementById("try-form");
  if (!form) return;
  const transcript = document.getElementById("transcript");
  const runs = document.getElementById("try-runs");
  const state = document.getElementById("try-state");
  const sendButton = document.getElementById("try-send");
  const POLL_MS = 400;

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
  }
  form.elements.agent.addEventListener("change", restart);
  form.elements.end_user.addEventListener("change", restart);

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = new FormData(form);
    sendButton.disabled = true;
    state.textContent = gettext("sending…");
    try {
      const response = await fetch(form.action, { method: "POST", body, credentials: "same-origin" });
      const data = await response.json();
      if (!response.ok) {
        state.textContent = data.message;
        return;
      }
      bubble("user", body.get("content"));
      form.elements.conversation.value = data.conversation_id;
      form.elements.content.value = "";
      await follow(data);
    } catch (error) {
      state.textContent = interpolate(gettext("error: %(message)s"), error, true);
    } finally {
      sendButton.disabled = false;
    }
  });
  // The button ships disabled: the script is deferred, and a send before it runs would be a plain
  // form post that shows raw JSON instead of the run.
  sendButton.disabled = false;
})();
