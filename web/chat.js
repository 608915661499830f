// lpx web UI: the chat playground over /v1/chat/completions (SSE). Conversations live
// in the browser's localStorage (one key, lpx-chats); answers render as Markdown
// through render.js. Uses $, headers() and modelId of app.js.
"use strict";

const lpxChat = (() => {
  const KEY = "lpx-chats";
  let controller = null; // AbortController of the reply being streamed
  let live = null;       // the message it is streamed into
  let state = load();    // {current: id, chats: [{id, title, messages: [{role, content, ...}]}]}

  function load() {
    try {
      const s = JSON.parse(localStorage.getItem(KEY));
      if (s && Array.isArray(s.chats)) return s;
    } catch (e) { /* a corrupt entry starts afresh */ }
    return { current: null, chats: [] };
  }

  function save() {
    try {
      localStorage.setItem(KEY, JSON.stringify(state));
    } catch (e) {
      $("chat-status").textContent = "not saved: " + e.message; // quota full
    }
  }

  const current = () => state.chats.find((c) => c.id === state.current);

  // Opening another chat stops the answer being streamed (kept, marked stopped).
  function newChat() {
    if (controller) controller.abort();
    const empty = state.chats.find((c) => !c.messages.length);
    if (empty) {
      state.current = empty.id;
    } else {
      const id = Date.now().toString(36) + Math.random().toString(36).slice(2, 6);
      state.chats.unshift({ id, title: "New chat", messages: [] });
      state.current = id;
    }
    save();
    show();
  }

  function switchTo(id) {
    if (controller) controller.abort();
    state.current = id;
    save();
    show();
  }

  function remove(id) {
    if (controller && id === state.current) controller.abort();
    state.chats = state.chats.filter((c) => c.id !== id);
    if (state.current === id) state.current = state.chats.length ? state.chats[0].id : null;
    if (!current()) return newChat();
    save();
    show();
  }

  function renderList() {
    const ul = $("conv-list");
    ul.textContent = "";
    for (const c of state.chats) {
      const li = document.createElement("li");
      li.className = c.id === state.current ? "current" : "";
      li.dataset.id = c.id;
      const open = document.createElement("button");
      open.type = "button";
      open.className = "open";
      open.textContent = c.title;
      open.title = c.title;
      open.addEventListener("click", () => switchTo(c.id));
      const del = document.createElement("button");
      del.type = "button";
      del.className = "delete";
      del.textContent = "×";
      del.title = "Delete this conversation";
      del.setAttribute("aria-label", del.title);
      del.addEventListener("click", () => remove(c.id));
      li.append(open, del);
      ul.appendChild(li);
    }
  }

  function button(label, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = label.toLowerCase();
    b.textContent = label;
    b.disabled = !!controller;
    b.addEventListener("click", () => onClick(b));
    return b;
  }

  function copy(text, b) {
    const done = () => { b.textContent = "Copied"; setTimeout(() => (b.textContent = "Copy"), 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => (b.textContent = "Copy failed"));
      return;
    }
    const t = document.createElement("textarea"); // plain-http hosts have no clipboard API
    t.value = text;
    document.body.appendChild(t);
    t.select();
    const ok = document.execCommand("copy");
    t.remove();
    ok ? done() : (b.textContent = "Copy failed");
  }

  function fillBody(body, m) {
    if (m.role === "assistant") lpxRender.markdown(body, m.content);
    else body.textContent = m.content;
  }

  // The element of message i of the current chat: its text and its actions.
  function messageEl(m, i, msgs) {
    const div = document.createElement("div");
    div.className = "msg " + m.role + (m.stopped ? " stopped" : "") + (m.error ? " error" : "");
    const body = document.createElement("div");
    body.className = "body";
    fillBody(body, m);
    div.appendChild(body);
    if (m.error) {
      const e = document.createElement("div");
      e.className = "error-text";
      e.textContent = "error: " + m.error;
      div.appendChild(e);
    }
    const bar = document.createElement("div");
    bar.className = "actions";
    const note = m.stopped ? "stopped" : m.finish === "length" ? "cut at max_tokens" : "";
    if (note) {
      const s = document.createElement("span");
      s.className = "badge";
      s.textContent = note;
      bar.appendChild(s);
    }
    bar.appendChild(button("Copy", (b) => copy(m.content, b)));
    if (m.role === "user") bar.appendChild(button("Edit", () => edit(div, i)));
    if (m.role === "assistant" && i === msgs.length - 1) bar.appendChild(button("Regenerate", regenerate));
    div.appendChild(bar);
    return div;
  }

  function show() {
    renderList();
    const box = $("messages");
    box.textContent = "";
    const c = current();
    if (!c) return;
    c.messages.forEach((m, i, msgs) => box.appendChild(messageEl(m, i, msgs)));
    box.scrollTop = box.scrollHeight;
  }

  function edit(div, i) {
    const c = current();
    const area = document.createElement("textarea");
    area.className = "edit-box";
    area.value = c.messages[i].content;
    area.rows = Math.min(8, area.value.split("\n").length + 1);
    const bar = document.createElement("div");
    bar.className = "actions";
    const resend = () => {
      const text = area.value.trim();
      if (!text || controller) return;
      c.messages.splice(i);
      c.messages.push({ role: "user", content: text });
      if (i === 0) c.title = titleOf(text);
      ask(c);
    };
    area.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey) {
        ev.preventDefault();
        resend();
      } else if (ev.key === "Escape") {
        show();
      }
    });
    bar.append(button("Send", resend), button("Cancel", show));
    div.replaceChildren(area, bar);
    area.focus();
  }

  function regenerate() {
    const c = current();
    if (c.messages.length && c.messages[c.messages.length - 1].role === "assistant") c.messages.pop();
    ask(c);
  }

  const titleOf = (text) => (text.length > 40 ? text.slice(0, 39) + "…" : text).replace(/\s+/g, " ");

  function numberOr(id, parse) {
    const v = $(id).value.trim();
    return v === "" ? undefined : parse(v);
  }

  // Reads an SSE body and calls onData with each "data:" payload.
  async function readSSE(body, onData) {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of event.split("\n"))
          if (line.startsWith("data: ")) onData(line.slice(6));
      }
    }
  }

  function setBusy(busy) {
    $("messages").setAttribute("aria-busy", busy); // read out once the answer is whole
    $("send").disabled = busy;
    $("stop").disabled = !busy;
    for (const b of document.querySelectorAll("#messages .actions button")) b.disabled = busy;
  }

  // Streams the answer to chat c's messages (the last is the user's) into a new
  // assistant message, saved when the answer ends, stops or fails.
  async function ask(c) {
    const m = { role: "assistant", content: "" };
    const messages = [];
    const sys = $("system").value.trim();
    if (sys) messages.push({ role: "system", content: sys });
    messages.push(...c.messages.map((x) => ({ role: x.role, content: x.content })));
    c.messages.push(m);
    save();
    controller = new AbortController();
    live = m;
    show();
    setBusy(true);
    const out = $("messages").lastChild;
    const body = out.querySelector(".body");
    out.classList.add("streaming");
    const request = {
      model: modelId || undefined, messages, stream: true,
      stream_options: { include_usage: true },
      temperature: numberOr("temperature", parseFloat),
      top_p: numberOr("top-p", parseFloat),
      top_k: numberOr("top-k", (v) => parseInt(v, 10)),
      max_tokens: numberOr("max-tokens", (v) => parseInt(v, 10)),
      seed: numberOr("seed", (v) => parseInt(v, 10)),
    };
    $("chat-status").textContent = "waiting for the first token…";
    const t0 = performance.now();
    let first = 0, usage = null, pending = false;
    const paint = () => {
      pending = false;
      const box = $("messages");
      const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
      fillBody(body, m);
      if (atEnd) box.scrollTop = box.scrollHeight;
    };
    try {
      const r = await fetch("/v1/chat/completions", {
        method: "POST", headers: headers(), body: JSON.stringify(request), signal: controller.signal,
      });
      if (!r.ok) {
        const j = await r.json().catch(() => ({}));
        throw new Error(r.status + ": " + (j.error ? j.error.message : r.statusText));
      }
      await readSSE(r.body, (data) => {
        if (data === "[DONE]") return;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.usage) usage = j.usage;
        for (const ch of j.choices || []) {
          if (ch.delta && ch.delta.content) {
            if (!first) first = performance.now();
            m.content += ch.delta.content;
            if (!pending) {
              pending = true;
              requestAnimationFrame(paint);
            }
          }
          if (ch.finish_reason) m.finish = ch.finish_reason;
        }
      });
      const secs = (performance.now() - t0) / 1000;
      $("chat-status").textContent =
        (usage ? usage.completion_tokens + " tokens, " : "") + secs.toFixed(2) + " s" +
        (first ? ", first token after " + ((first - t0) / 1000).toFixed(2) + " s" : "") +
        (m.finish ? ", finish: " + m.finish : "");
    } catch (e) {
      if (e.name === "AbortError") {
        m.stopped = true;
        $("chat-status").textContent = "stopped";
      } else {
        m.error = e.message;
        $("chat-status").textContent = "";
      }
    } finally {
      controller = null;
      live = null;
      save();
      if (current() === c) show();
      setBusy(false);
    }
  }

  $("compose").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || controller) return;
    $("prompt").value = "";
    let c = current();
    if (!c) {
      newChat();
      c = current();
    }
    if (!c.messages.length) c.title = titleOf(text);
    c.messages.push({ role: "user", content: text });
    ask(c);
  });
  $("prompt").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      $("compose").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => controller && controller.abort());
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && controller) controller.abort();
  });
  $("new-chat").addEventListener("click", newChat);
  window.addEventListener("pagehide", () => { // a reload or a closed tab stops the answer
    if (live) {
      live.stopped = true;
      save();
    }
  });
  window.addEventListener("storage", (ev) => { // another tab changed the conversations
    if (ev.key === KEY && !controller) {
      state = load();
      show();
    }
  });

  if (!current()) newChat();
  else show();
  return { current, state: () => state };
})();
