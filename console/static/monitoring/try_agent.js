// Try an agent: post the message, then poll the run's events until it ends.
(function () {
  const form = document.getElementById("try-form");
  if (!form) return;
  const transcript = document.getElementById("transcript");
  const eventsBody = document.querySelector("#try-events tbody");
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

  function addEventRow(event) {
    const row = eventsBody.insertRow();
    row.dataset.type = event.type;
    row.insertCell().textContent = event.seq;
    row.insertCell().textContent = event.type;
    row.insertCell().textContent = JSON.stringify(event.payload);
  }

  async function follow(run) {
    let after = 0;
    let streamed = "";
    const answer = bubble("assistant pending", "…");
    const note = bubble("note", "");
    for (;;) {
      const response = await fetch(`${run.events_url}?after=${after}`, { credentials: "same-origin" });
      if (!response.ok) {
        state.textContent = `polling failed: HTTP ${response.status}`;
        return;
      }
      const data = await response.json();
      for (const event of data.events) {
        after = event.seq;
        addEventRow(event);
        if (event.type === "message.delta") {
          streamed += event.payload.text;
          answer.textContent = streamed;
        } else if (event.type === "tool.started") {
          note.textContent = `calling ${event.payload.tool} ${JSON.stringify(event.payload.arguments)}`;
        } else if (event.type === "approval.requested") {
          note.textContent = `waiting for approval of ${event.payload.tool}`;
        } else if (event.type === "llm_call.completed") {
          streamed = "";
        }
      }
      state.textContent = data.run.status;
      if (data.run.terminal) {
        answer.classList.remove("pending");
        answer.textContent = data.answer || data.run.error || `(run ${data.run.status})`;
        note.innerHTML = "";
        const link = document.createElement("a");
        link.href = run.timeline_url;
        link.textContent = `run ${data.run.status}${data.run.stop_reason ? ` (${data.run.stop_reason})` : ""} · ${data.run.total_tokens} tokens · timeline`;
        note.appendChild(link);
        return;
      }
      if (data.events.length === 0) await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }

  // A conversation is with one agent: choosing another starts a new one.
  form.elements.agent.addEventListener("change", () => {
    form.elements.conversation.value = "";
    transcript.replaceChildren();
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = new FormData(form);
    sendButton.disabled = true;
    state.textContent = "sending…";
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
      state.textContent = `error: ${error.message}`;
    } finally {
      sendButton.disabled = false;
    }
  });
})();
