// The prompt playground: post the edited draft with a message, then follow the two runs it
// starts (the draft's and the live version's) on their events until both end, side by side:
// answer, status, tokens, cost, tool calls, and a link to each timeline. "Save as draft" and
// "Run the eval suite" post the same form to their own endpoints.
(function () {
  const form = document.getElementById("playground-form");
  if (!form) return;
  const state = document.getElementById("playground-state");
  const kept = document.getElementById("playground-kept");
  const sendButton = document.getElementById("playground-send");
  const POLL_MS = 400;

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function pretty(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  // One side's view: version, status line, answer, tool calls, and its timeline link.
  function sideView(name, run, question) {
    const body = document.querySelector(`#side-${name} .side-body`);
    const version = element("p", "side-version", run.version);
    const asked = element("div", "bubble user side-question", question);
    const status = element("p", "side-status", gettext("queued"));
    const answer = element("div", "bubble assistant pending side-answer", "…");
    const calls = element("ul", "side-calls");
    const link = element("a", "side-timeline", gettext("open the run's timeline"));
    link.href = run.timeline_url;
    const linkLine = element("p");
    linkLine.append(link);
    body.replaceChildren(version, asked, status, answer, calls, linkLine);
    body.closest("section").dataset.status = "queued";
    return { body, status, answer, calls };
  }

  function showCalls(view, toolCalls) {
    view.calls.replaceChildren(
      ...toolCalls.map((call) => {
        const item = element("li", "", "");
        item.dataset.status = call.status;
        item.append(element("code", "", call.tool), ` ${pretty(call.arguments)} → ${call.status_text}`);
        if (call.error) item.append(element("pre", "error", call.error));
        else if (call.result) item.append(element("pre", "result", call.result_cut ? `${call.result}…` : call.result));
        return item;
      }),
    );
  }

  async function follow(name, run, question) {
    const view = sideView(name, run, question);
    let after = 0;
    for (;;) {
      const response = await fetch(`${run.events_url}?after=${after}`, { credentials: "same-origin" });
      if (!response.ok) {
        view.status.textContent = interpolate(gettext("polling failed: HTTP %(status)s"), response, true);
        return;
      }
      const data = await response.json();
      data.events.forEach((event) => { after = event.seq; });
      const words = data.run.stop_reason_text ? `${data.run.status_text} (${data.run.stop_reason_text})` : data.run.status_text;
      view.status.textContent = interpolate(
        gettext("%(words)s · %(tokens)s tokens · cost %(cost)s · %(calls)s tool calls"),
        { words, tokens: data.run.total_tokens, cost: data.run.cost, calls: data.tool_calls.length },
        true,
      );
      view.body.closest("section").dataset.status = data.run.status;
      showCalls(view, data.tool_calls);
      if (data.run.terminal) {
        view.answer.classList.remove("pending");
        view.answer.textContent = data.answer || data.run.error || interpolate(gettext("(run %(status)s)"), { status: data.run.status_text }, true);
        return;
      }
      if (data.events.length === 0) await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }

  async function post(url, body) {
    const response = await fetch(url, { method: "POST", body, credentials: "same-origin" });
    return { response, data: await response.json() };
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    sendButton.disabled = true;
    state.textContent = gettext("sending…");
    try {
      const { response, data } = await post(form.action, new FormData(form));
      if (!response.ok) {
        state.textContent = data.message;
        return;
      }
      state.textContent = gettext("both runs queued");
      await Promise.all([follow("draft", data.draft, data.content), follow("live", data.live, data.content)]);
      state.textContent = gettext("both runs ended");
    } catch (error) {
      state.textContent = interpolate(gettext("error: %(message)s"), error, true);
    } finally {
      sendButton.disabled = false;
    }
  });

  const saveButton = document.getElementById("playground-save");
  if (saveButton) {
    saveButton.addEventListener("click", async () => {
      kept.textContent = gettext("saving…");
      const { data } = await post(form.dataset.saveUrl, new FormData(form));
      kept.replaceChildren(data.message);
      if (data.versions_url) {
        const link = element("a", "", gettext("versions and releases"));
        link.href = data.versions_url;
        kept.append(" ", link);
      }
    });
  }

  const evalButton = document.getElementById("playground-eval");
  if (evalButton) {
    evalButton.addEventListener("click", async () => {
      const body = new FormData(form);
      body.set("suite", document.getElementById("id_suite").value);
      kept.textContent = gettext("starting the eval run…");
      const { response, data } = await post(form.dataset.evalUrl, body);
      if (!response.ok) {
        kept.textContent = data.message;
        return;
      }
      const link = element("a", "", interpolate(gettext("eval run %(id)s"), { id: data.eval_run_id }, true));
      link.href = data.url;
      kept.replaceChildren(gettext("Started: "), link);
    });
  }
})();
