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
 *
 * Attachments: the attach button, a pasted image or files dropped on the panel wait under the
 * text box (images as thumbnails, other files as chips with name and size; each can be removed)
 * and are uploaded one by one when the message is sent, which then names them. Thumbnails of
 * earlier messages are the end user's own downloads, fetched with the token as a blob.
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
      attach: "Attach a file",
      remove: "Remove ",
      tooLarge: "{name} is larger than {limit}, the most a file may be.",
      tooMany: "A message may carry at most {count} attachments.",
      uploading: "Uploading {name}…",
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
      attach: "添加附件",
      remove: "移除 ",
      tooLarge: "{name} 超过了单个文件的上限 {limit}。",
      tooMany: "每条消息最多可带 {count} 个附件。",
      uploading: "正在上传 {name}…",
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
  // What the widget's API says a message may carry (widget.attachments); checked again there.
  var limits = { max_bytes: 0, per_message: 0 };
  // The files waiting to be sent: {file, url (an object URL for an image), node}.
  var pending = [];

  function format(text, values) {
    return text.replace(/\{(\w+)\}/g, function (all, key) {
      return values[key] === undefined ? all : String(values[key]);
    });
  }

  function sizeText(bytes) {
    if (bytes >= 1000 * 1000) {
      return (bytes / 1000 / 1000).toFixed(1) + " MB";
    }
    return bytes >= 1000 ? Math.round(bytes / 1000) + " KB" : bytes + " B";
  }

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
    "form button.attach { padding: 0 10px; background: #eef0f4; color: #1c1e21; font-size: 18px; }",
    "form button:focus-visible, .tray button:focus-visible { outline: 2px solid #1c1e21; outline-offset: 2px; }",
    ".tray { display: flex; flex-wrap: wrap; gap: 6px; padding: 0 12px; }",
    ".tray:empty { display: none; }",
    ".tray .item { position: relative; padding-top: 8px; }",
    ".tray button { position: absolute; top: 0; right: -6px; width: 22px; height: 22px; border: 0; border-radius: 11px;",
    "  background: #1c1e21; color: #fff; font-size: 13px; line-height: 22px; padding: 0; cursor: pointer; }",
    ".thumb { display: block; width: 64px; height: 64px; object-fit: cover; border-radius: 6px; background: #eef0f4; }",
    ".chip { display: inline-block; max-width: 200px; padding: 6px 8px; border-radius: 6px; background: #eef0f4;",
    "  color: #1c1e21; font-size: 12px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }",
    ".parts { display: flex; flex-wrap: wrap; gap: 6px; justify-content: flex-end; }",
    ".panel.dropping .log { outline: 2px dashed #2f5bea; outline-offset: -6px; }",
    ".hidden-input { display: none; }",
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
  var fileInput = el("input", "hidden-input");
  fileInput.type = "file";
  fileInput.multiple = true;
  fileInput.tabIndex = -1;
  fileInput.setAttribute("aria-hidden", "true");
  var attachButton = el("button", "attach", "+");
  attachButton.type = "button";
  attachButton.setAttribute("aria-label", t.attach);
  attachButton.title = t.attach;
  var tray = el("div", "tray");
  form.appendChild(attachButton);
  form.appendChild(fileInput);
  form.appendChild(input);
  form.appendChild(sendButton);
  panel.appendChild(header);
  panel.appendChild(log);
  panel.appendChild(tray);
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

  // ---- Attachments ----

  function isImage(type) {
    return /^image\/(png|jpeg|gif|webp)$/.test(type || "");
  }

  // An attachment as shown: a thumbnail for an image (its src given later, once fetched), a
  // chip with its name and size for anything else.
  function partNode(name, size, image) {
    if (image) {
      var img = el("img", "thumb");
      img.alt = name;
      return img;
    }
    return el("span", "chip", name + " · " + sizeText(size));
  }

  function refuseFile(message) {
    showError(message);
    return false;
  }

  function attachable(file) {
    if (limits.per_message && pending.length >= limits.per_message) {
      return refuseFile(format(t.tooMany, { count: limits.per_message }));
    }
    if (limits.max_bytes && file.size > limits.max_bytes) {
      return refuseFile(format(t.tooLarge, { name: file.name, limit: sizeText(limits.max_bytes) }));
    }
    return true;
  }

  function addFiles(files) {
    Array.prototype.forEach.call(files || [], function (file) {
      if (!attachable(file)) {
        return;
      }
      var entry = { file: file, url: isImage(file.type) ? URL.createObjectURL(file) : null };
      var name = file.name || "image";
      var node = partNode(name, file.size, !!entry.url);
      if (entry.url) {
        node.src = entry.url;
      }
      var item = el("div", "item");
      var remove = el("button", "remove", "×");
      remove.type = "button";
      remove.setAttribute("aria-label", t.remove + name);
      remove.addEventListener("click", function () {
        pending = pending.filter(function (other) {
          return other !== entry;
        });
        if (entry.url) {
          URL.revokeObjectURL(entry.url);
        }
        item.remove();
        input.focus();
      });
      item.appendChild(node);
      item.appendChild(remove);
      entry.node = item;
      pending.push(entry);
      tray.appendChild(item);
    });
  }

  attachButton.addEventListener("click", function () {
    fileInput.click();
  });
  fileInput.addEventListener("change", function () {
    addFiles(fileInput.files);
    fileInput.value = "";
  });
  input.addEventListener("paste", function (event) {
    var files = event.clipboardData && event.clipboardData.files;
    if (files && files.length) {
      event.preventDefault();
      addFiles(files);
    }
  });
  panel.addEventListener("dragover", function (event) {
    if (event.dataTransfer && Array.prototype.indexOf.call(event.dataTransfer.types, "Files") >= 0) {
      event.preventDefault();
      panel.classList.add("dropping");
    }
  });
  panel.addEventListener("dragleave", function (event) {
    if (event.target === panel || !panel.contains(event.relatedTarget)) {
      panel.classList.remove("dropping");
    }
  });
  panel.addEventListener("drop", function (event) {
    panel.classList.remove("dropping");
    if (event.dataTransfer && event.dataTransfer.files.length) {
      event.preventDefault();
      addFiles(event.dataTransfer.files);
    }
  });

  // ---- The API ----

  // The server's messages in the widget's language, whatever the browser's.
  function headers(json) {
    var all = { Authorization: "Bearer " + token, "Accept-Language": lang };
    if (json) {
      all["Content-Type"] = "application/json";
    }
    return all;
  }

  function call(method, path, body) {
    var form = typeof FormData !== "undefined" && body instanceof FormData;
    return fetch(api + path, {
      method: method,
      headers: headers(!form),
      body: body === undefined || form ? body : JSON.stringify(body),
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
    if (result.status === 413 && limits.max_bytes) {
      message = format(t.tooLarge, { name: result.name || "", limit: sizeText(limits.max_bytes) });
    }
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
      attachButton.setAttribute("aria-label", t.attach);
      attachButton.title = t.attach;
        }
    if (widget.attachments) {
      limits = widget.attachments;
    }
    log.textContent = "";
    if (widget.greeting) {
      add(el("div", "msg greeting", widget.greeting));
    }
    (state.messages || []).forEach(function (message) {
      var role = message.role === "user" ? "user" : "assistant";
      if (message.parts && message.parts.length) {
        add(storedParts(message.parts));
      }
      if (message.content) {
        add(el("div", "msg " + role, message.content));
      }
    });
  }

  // An earlier message's attachments: an image's thumbnail is its download, fetched with the
  // token (an <img> cannot send it) and shown from a blob.
  function storedParts(parts) {
    var row = el("div", "parts");
    parts.forEach(function (part) {
      var image = part.type === "image" && isImage(part.media_type);
      var node = partNode(part.name || part.media_type, part.size, image);
      row.appendChild(node);
      if (image) {
        fetch(api + "/attachments/" + encodeURIComponent(part.attachment) + "/content/", {
          headers: headers(false),
          credentials: "omit",
        })
          .then(function (response) {
            return response.ok ? response.blob() : null;
          })
          .then(function (blob) {
            if (blob) {
              node.src = URL.createObjectURL(blob);
            }
          })
          .catch(function () {
            return null;
          });
      }
    });
    return row;
  }

  function sentParts(entries) {
    var row = el("div", "parts");
    entries.forEach(function (entry) {
      var node = partNode(entry.file.name || "image", entry.file.size, !!entry.url);
      if (entry.url) {
        node.src = entry.url; // kept: the thumbnail stays in the conversation
      }
      row.appendChild(node);
    });
    return row;
  }

  // The waiting files, uploaded in order: their ids, or the first refusal.
  function uploadAll(entries) {
    var ids = [];
    return entries
      .reduce(function (previous, entry) {
        return previous.then(function () {
          var body = new FormData();
          body.append("file", entry.file, entry.file.name || "image");
          return call("POST", "/attachments/", body).then(function (result) {
            if (result.status !== 201) {
              result.name = entry.file.name;
              throw new Error((entry.file.name ? entry.file.name + ": " : "") + refusal(result));
            }
            ids.push(result.data.id);
          });
        });
      }, Promise.resolve())
      .then(function () {
        return ids;
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
    var entries = pending.slice();
    var id = null;
    return conversation()
      .then(function (opened) {
        id = opened;
        return uploadAll(entries);
      })
      .then(function (ids) {
        var body = { content: text };
        if (ids.length) {
          body.attachments = ids;
        }
        return call("POST", "/conversations/" + encodeURIComponent(id) + "/messages/", body);
      })
      .then(function (result) {
        if (result.status !== 202) {
          throw new Error(refusal(result));
        }
        if (entries.length) {
          add(sentParts(entries));
        }
        if (text) {
          add(el("div", "msg user", text));
        }
        input.value = "";
        pending = pending.filter(function (entry) {
          return entries.indexOf(entry) < 0;
        });
        entries.forEach(function (entry) {
          entry.node.remove();
        });
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
    if ((text.trim() || pending.length) && !sendButton.disabled) {
      send(text.trim() ? text : "");
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
