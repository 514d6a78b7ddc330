/*
 * Agentry's embeddable chat (docs/widget.md).
 *
 *   <script src="https://agentry.example.com/widget.js" data-widget="WIDGET ID"
 *           data-token="END-USER TOKEN" data-lang="zh-hans"></script>
 *
 * data-token: a JWT the page's backend signed with the widget's secret, or data-token-url: an
 * address on the page's own site that answers one (as text, or JSON {"token": "..."}).
 * data-lang: "zh-hans" or "en" (default: the widget's language, else the browser's).
 * data-open="full": the panel fills the page and stays open (the hosted page /chat/<id>/).
 *
 * Plain script, no build step, no request anywhere but to the Agentry site it came from. The
 * panel lives in a shadow root, so the page's CSS cannot reach it; everything shown from the
 * server or the user is set as textContent, never as HTML.
 */
(function () {
  "use strict";

  var script = document.currentScript;
  if (!script) {
    return;
  }

  var STRINGS = {
    en: {
      open: "Chat",
      close: "Close",
      placeholder: "Type a message…",
      send: "Send",
      toolRunning: "Tool running: ",
      toolDone: "Tool finished: ",
      approvalWaiting: "Waiting for approval: ",
      approvalDecided: "Approval decided: ",
      failed: "The answer failed. Please try again.",
      noToken: "This chat cannot start: the page gave no end-user token.",
      network: "The chat service cannot be reached.",
      refused: "The chat refused this page: ",
    },
    "zh-hans": {
      open: "咨询",
      close: "关闭",
      placeholder: "输入消息…",
      send: "发送",
      toolRunning: "正在调用工具：",
      toolDone: "工具已完成：",
      approvalWaiting: "等待审批：",
      approvalDecided: "审批已处理：",
      failed: "回答失败，请重试。",
      noToken: "无法开始对话：页面没有提供终端用户令牌。",
      network: "无法连接聊天服务。",
      refused: "聊天服务拒绝了此页面：",
    },
  };
  var TERMINAL = ["run.completed", "run.failed", "run.cancelled", "run.expired"];

  var base = new URL(script.src, location.href).origin;
  var widgetId = script.getAttribute("data-widget") || "";
  var api = base + "/api/v1/widget/" + encodeURIComponent(widgetId);
  var full = script.getAttribute("data-open") === "full";

  function pickLanguage(value) {
    return String(value || "").toLowerCase().indexOf("zh") === 0 ? "zh-hans" : "en";
  }

  var lang = pickLanguage(script.getAttribute("data-lang") || navigator.language);
  var t = STRINGS[lang];
  var token = "";
  var conversationId = null;
  var storageKey = null;

  // The end user the token names, for the storage key only: the server checks the signature.
  function tokenEndUser(value) {
    try {
      var part = value.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      var json = decodeURIComponent(
        Array.prototype.map
          .call(atob(part), function (c) {
            return "%" + ("00" + c.charCodeAt(0).toString(16)).slice(-2);
          })
          .join("")
      );
      return String(JSON.parse(json).u || "");
    } catch (e) {
      return "";
    }
  }

  function stored(value) {
    try {
      if (value === undefined) {
        return localStorage.getItem(storageKey);
      }
      if (value === null) {
        localStorage.removeItem(storageKey);
      } else {
        localStorage.setItem(storageKey, value);
      }
    } catch (e) {
      return null; // storage disabled: the conversation lasts as long as the page
    }
    return null;
  }

  // ---- The panel ----

  var host = document.createElement("div");
  host.setAttribute("data-agentry-widget", widgetId);
  var root = host.attachShadow({ mode: "open" });
  var style = document.createElement("style");
  style.textContent = [
    ":host { all: initial; }",
    "* { box-sizing: border-box; font-family: system-ui, -apple-system, 'PingFang SC', 'Microsoft YaHei', sans-serif; }",
    ".launcher { position: fixed; right: 20px; bottom: 20px; z-index: 2147483000; border: 0; border-radius: 24px;",
    "  padding: 12px 20px; background: #2f5bea; color: #fff; font-size: 15px; cursor: pointer; box-shadow: 0 2px 8px rgba(0,0,0,.25); }",
    ".panel { position: fixed; right: 20px; bottom: 80px; z-index: 2147483000; width: 360px; max-width: calc(100vw - 40px);",
    "  height: 520px; max-height: calc(100vh - 100px); display: flex; flex-direction: column; background: #fff; color: #1c1e21;",
    "  border-radius: 12px; box-shadow: 0 4px 24px rgba(0,0,0,.25); overflow: hidden; font-size: 14px; }",
    ".panel[hidden] { display: none; }",
    ".panel.full { inset: 0; width: auto; max-width: none; height: auto; max-height: none; border-radius: 0; }",
    "header { display: flex; align-items: center; justify-content: space-between; padding: 12px 16px; background: #2f5bea; color: #fff; }",
    "header strong { font-size: 15px; }",
    "header button { border: 0; background: transparent; color: #fff; font-size: 14px; cursor: pointer; }",
    ".log { flex: 1; overflow-y: auto; padding: 12px 16px; display: flex; flex-direction: column; gap: 8px; }",
    ".msg { max-width: 85%; padding: 8px 12px; border-radius: 10px; white-space: pre-wrap; word-wrap: break-word; line-height: 1.45; }",
    ".msg.user { align-self: flex-end; background: #2f5bea; color: #fff; }",
    ".msg.assistant { align-self: flex-start; background: #eef0f4; }",
    ".msg.greeting { align-self: flex-start; background: #eef0f4; color: #444; }",
    ".note { align-self: center; font-size: 12px; color: #5f6672; }",
    ".note.approval { color: #9a6700; }",
    ".error { align-self: stretch; font-size: 13px; color: #b42318; background: #fef3f2; padding: 8px 12px; border-radius: 8px; }",
    "form { display: flex; gap: 8px; padding: 10px 12px; border-top: 1px solid #e3e5e8; }",
    "textarea { flex: 1; resize: none; height: 40px; padding: 9px 10px; border: 1px solid #c9cdd4; border-radius: 8px; font-size: 14px; }",
    "form button { border: 0; border-radius: 8px; padding: 0 16px; background: #2f5bea; color: #fff; font-size: 14px; cursor: pointer; }",
    "form button:disabled { background: #9aa8d8; cursor: default; }",
  ].join("\n");

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) {
      node.className = className;
    }
    if (text !== undefined) {
      node.textContent = text;
    }
    return node;
  }

  var launcher = el("button", "launcher", t.open);
  launcher.type = "button";
  var panel = el("div", "panel" + (full ? " full" : ""));
  panel.setAttribute("role", "dialog");
  panel.hidden = !full;
  var header = el("header");
  var title = el("strong", "title", "");
  var closeButton = el("button", "close", t.close);
  closeButton.type = "button";
  header.appendChild(title);
  if (!full) {
    header.appendChild(closeButton);
  }
  var log = el("div", "log");
  log.setAttribute("aria-live", "polite");
  var form = el("form");
  var input = el("textarea");
  input.placeholder = t.placeholder;
  input.setAttribute("aria-label", t.placeholder);
  var sendButton = el("button", "send", t.send);
  sendButton.type = "submit";
  form.appendChild(input);
  form.appendChild(sendButton);
  panel.appendChild(header);
  panel.appendChild(log);
  panel.appendChild(form);
  root.appendChild(style);
  if (!full) {
    root.appendChild(launcher);
  }
  root.appendChild(panel);

  function add(node) {
    log.appendChild(node);
    log.scrollTop = log.scrollHeight;
    return node;
  }

  function showError(message) {
    add(el("div", "error", message));
  }

  function setBusy(busy) {
    sendButton.disabled = busy;
  }

  // ---- The API ----

  function call(method, path, body) {
    return fetch(api + path, {
      method: method,
      headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
    }).then(function (response) {
      return response
        .json()
        .catch(function () {
          return {};
        })
        .then(function (data) {
          return { status: response.status, data: data };
        });
    });
  }

  function refusal(result) {
    var message = (result.data && result.data.message) || String(result.status);
    return result.status === 401 || result.status === 403 ? t.refused + message : message;
  }

  function show(state) {
    var widget = state.widget || {};
    title.textContent = widget.title || "";
    if (!script.getAttribute("data-lang") && widget.language && STRINGS[widget.language]) {
      lang = widget.language;
      t = STRINGS[lang];
      launcher.textContent = t.open;
      closeButton.textContent = t.close;
      sendButton.textContent = t.send;
      input.placeholder = t.placeholder;
    }
    log.textContent = "";
    if (widget.greeting) {
      add(el("div", "msg greeting", widget.greeting));
    }
    (state.messages || []).forEach(function (message) {
      add(el("div", "msg " + (message.role === "user" ? "user" : "assistant"), message.content));
    });
  }

  var opening = null;

  // The end user's conversation: the stored one again, or a new one.
  function conversation() {
    if (conversationId) {
      return Promise.resolve(conversationId);
    }
    if (opening) {
      return opening;
    }
    var kept = stored();
    opening = call("POST", "/conversations/", kept ? { conversation: kept } : {})
      .then(function (result) {
        if (result.status === 404 && kept) {
          stored(null); // deleted, or another end user's: start afresh
          opening = null;
          return conversation();
        }
        if (result.status !== 200 && result.status !== 201) {
          throw new Error(refusal(result));
        }
        conversationId = result.data.id;
        stored(conversationId);
        show(result.data);
        if (result.data.active_run) {
          follow(result.data.active_run);
        }
        return conversationId;
      })
      .catch(function (error) {
        opening = null;
        throw error;
      });
    return opening;
  }

  // ---- A run's events ----

  function follow(runId) {
    setBusy(true);
    var bubble = null;
    var tools = {};
    var source = new EventSource(
      api + "/runs/" + encodeURIComponent(runId) + "/events/?token=" + encodeURIComponent(token)
    );
    // An event's data: {"run", "seq", "type", "payload": {...}, "created_at"}.
    function data(event) {
      try {
        return JSON.parse(event.data).payload || {};
      } catch (e) {
        return {};
      }
    }
    source.addEventListener("message.delta", function (event) {
      if (!bubble) {
        bubble = add(el("div", "msg assistant", ""));
      }
      bubble.textContent += data(event).text || "";
      log.scrollTop = log.scrollHeight;
    });
    source.addEventListener("tool.started", function (event) {
      var payload = data(event);
      // Text after the tool is another message.
      bubble = null;
      tools[payload.tool_invocation_id] = add(el("div", "note tool", t.toolRunning + (payload.tool || "")));
    });
    source.addEventListener("tool.completed", function (event) {
      var payload = data(event);
      var line = tools[payload.tool_invocation_id];
      if (line) {
        line.textContent = t.toolDone + (payload.tool || "");
      }
    });
    source.addEventListener("approval.requested", function (event) {
      bubble = null;
      add(el("div", "note approval", t.approvalWaiting + (data(event).tool || "")));
    });
    source.addEventListener("approval.decided", function (event) {
      add(el("div", "note approval", t.approvalDecided + (data(event).tool || "")));
    });
    TERMINAL.forEach(function (type) {
      source.addEventListener(type, function () {
        source.close();
        setBusy(false);
        if (type !== "run.completed") {
          showError(t.failed);
        } else if (!bubble) {
          // A model that does not stream sends no deltas: read the answer from the conversation.
          call("GET", "/conversations/" + encodeURIComponent(conversationId) + "/").then(function (result) {
            var messages = (result.data && result.data.messages) || [];
            var last = messages[messages.length - 1];
            if (last && last.role === "assistant") {
              add(el("div", "msg assistant", last.content));
            }
          });
        }
      });
    });
    source.onerror = function () {
      // The stream answers 204 after the run's end, which closes it; otherwise it reconnects.
      if (source.readyState === EventSource.CLOSED) {
        setBusy(false);
      }
    };
  }

  function send(text) {
    setBusy(true);
    return conversation()
      .then(function (id) {
        return call("POST", "/conversations/" + encodeURIComponent(id) + "/messages/", { content: text });
      })
      .then(function (result) {
        if (result.status !== 202) {
          throw new Error(refusal(result));
        }
        add(el("div", "msg user", text));
        input.value = "";
        follow(result.data.run);
      })
      .catch(function (error) {
        setBusy(false);
        showError(error.message || t.network);
      });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = input.value;
    if (text.trim() && !sendButton.disabled) {
      send(text);
    }
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  var ready = null;

  function start() {
    if (!ready) {
      ready = tokenLoaded().then(function () {
        if (!token) {
          throw new Error(t.noToken);
        }
        storageKey = "agentry-widget:" + widgetId + ":" + tokenEndUser(token);
        return conversation();
      });
      ready.catch(function (error) {
        ready = null;
        setBusy(true);
        showError(error.message || t.network);
      });
    }
    return ready;
  }

  function tokenLoaded() {
    var url = script.getAttribute("data-token-url");
    token = script.getAttribute("data-token") || "";
    if (token || !url) {
      return Promise.resolve();
    }
    // The page's own backend, with the page's cookies: it knows who is signed in.
    return fetch(url, { credentials: "same-origin" })
      .then(function (response) {
        return response.text();
      })
      .then(function (text) {
        try {
          token = String(JSON.parse(text).token || "");
        } catch (e) {
          token = text.trim();
        }
      });
  }

  launcher.addEventListener("click", function () {
    panel.hidden = !panel.hidden;
    if (!panel.hidden) {
      start();
      input.focus();
    }
  });
  closeButton.addEventListener("click", function () {
    panel.hidden = true;
  });

  function mount() {
    document.body.appendChild(host);
    // A conversation kept from an earlier page is shown (and a running answer followed) at once.
    if (full) {
      start();
    } else {
      tokenLoaded().then(function () {
        storageKey = "agentry-widget:" + widgetId + ":" + tokenEndUser(token);
        if (token && stored()) {
          panel.hidden = false;
          start();
        }
      });
    }
  }

  if (document.body) {
    mount();
  } else {
    document.addEventListener("DOMContentLoaded", mount);
  }
})();
