// page.cc: the web chat page (one HTML file with inline CSS and JS, no build step). It
// keeps the conversation in the browser, streams /v1/chat/completions with fetch() and
// reads the server-sent events itself, shows tokens/s, and has a stop button (aborting
// the fetch frees the server at once), temperature and max-tokens settings and an API key
// field (kept in localStorage). ?q=TEXT sends TEXT on load (used by the headless test);
// <body data-state> is "idle", "streaming", "done" or "error".
#include "serve/page.h"

namespace serve {

const char* const kChatPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>shardlm chat</title>
<style>
  :root { --bg:#f6f7f9; --fg:#1d2330; --muted:#6b7280; --user:#dbeafe; --bot:#ffffff; --accent:#2563eb; }
  * { box-sizing: border-box; }
  body { margin:0; font:15px/1.5 system-ui, sans-serif; background:var(--bg); color:var(--fg);
         display:flex; flex-direction:column; height:100vh; }
  header { display:flex; gap:1em; align-items:center; padding:.6em 1em; background:#fff; border-bottom:1px solid #e5e7eb; flex-wrap:wrap; }
  header h1 { font-size:1.05em; margin:0 1em 0 0; }
  header label { color:var(--muted); font-size:.9em; }
  header input { width:5.5em; margin-left:.3em; }
  #key { width:10em; }
  #log { flex:1; overflow-y:auto; padding:1em; display:flex; flex-direction:column; gap:.7em; }
  .msg { max-width:48em; padding:.6em .9em; border-radius:10px; white-space:pre-wrap; word-wrap:break-word;
         box-shadow:0 1px 2px rgba(0,0,0,.06); }
  .user { align-self:flex-end; background:var(--user); }
  .assistant { align-self:flex-start; background:var(--bot); }
  .error { align-self:center; color:#b91c1c; }
  footer { display:flex; gap:.5em; padding:.7em 1em; background:#fff; border-top:1px solid #e5e7eb; }
  textarea { flex:1; resize:none; height:3.2em; font:inherit; padding:.4em; }
  button { font:inherit; padding:0 1.2em; border-radius:6px; border:1px solid var(--accent); background:var(--accent); color:#fff; }
  button:disabled { opacity:.4; }
  #stop { background:#fff; color:var(--accent); }
  #speed { color:var(--muted); font-size:.9em; margin-left:auto; }
</style>
</head>
<body data-state="idle">
<header>
  <h1>shardlm chat</h1>
  <label>temperature <input id="temp" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="maxtok" type="number" min="1" step="1" value="256"></label>
  <label>API key <input id="key" type="password" placeholder="(if required)"></label>
  <span id="speed"></span>
</header>
<div id="log"></div>
<footer>
  <textarea id="input" placeholder="Type a message; Enter sends, Shift+Enter adds a line"></textarea>
  <button id="send">Send</button>
  <button id="stop" disabled>Stop</button>
</footer>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let controller = null;
$("key").value = localStorage.getItem("shardlm_key") || "";
$("key").addEventListener("change", () => localStorage.setItem("shardlm_key", $("key").value));

function bubble(cls, text) {
  const d = document.createElement("div");
  d.className = "msg " + cls;
  d.textContent = text;
  $("log").appendChild(d);
  $("log").scrollTop = $("log").scrollHeight;
  return d;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function send(text) {
  text = text.trim();
  if (!text || controller) return;
  history.push({role: "user", content: text});
  bubble("user", text);
  const out = bubble("assistant", "");
  out.id = "answer-" + history.length;
  const body = {
    messages: history, stream: true, stream_options: {include_usage: true},
    temperature: parseFloat($("temp").value), max_tokens: parseInt($("maxtok").value, 10)
  };
  const headers = {"Content-Type": "application/json"};
  if ($("key").value) headers["Authorization"] = "Bearer " + $("key").value;
  controller = new AbortController();
  setBusy(true);
  document.body.dataset.state = "streaming";
  let answer = "", tokens = 0, chunks = 0, t0 = 0, state = "done";
  try {
    const res = await fetch("/v1/chat/completions", {method: "POST", headers, body: JSON.stringify(body),
                                                      signal: controller.signal});
    if (!res.ok) {
      let msg = res.status + " " + res.statusText;
      try { msg = (await res.json()).error.message; } catch (e) {}
      throw new Error(msg);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += decoder.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          if (j.usage) tokens = j.usage.completion_tokens;
          const c = j.choices && j.choices[0];
          if (c && c.delta && c.delta.content) {
            if (!t0) t0 = performance.now();
            chunks++;
            answer += c.delta.content;
            out.textContent = answer;
            $("log").scrollTop = $("log").scrollHeight;
          }
        }
      }
      const s = t0 ? (performance.now() - t0) / 1000 : 0;
      if (chunks > 1 && s > 0) $("speed").textContent = ((chunks - 1) / s).toFixed(1) + " tokens/s";
    }
    const s = t0 ? (performance.now() - t0) / 1000 : 0;
    if (tokens > 1 && s > 0) $("speed").textContent = tokens + " tokens, " + ((tokens - 1) / s).toFixed(1) + " tokens/s";
  } catch (e) {
    if (e.name === "AbortError") {
      out.textContent = answer + " [stopped]";
    } else {
      bubble("error", "error: " + e.message);
      state = "error";
    }
  }
  history.push({role: "assistant", content: answer});
  controller = null;
  setBusy(false);
  document.body.dataset.state = state;
}

$("send").addEventListener("click", () => { const t = $("input").value; $("input").value = ""; send(t); });
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("send").click(); }
});
const q = new URLSearchParams(location.search);
if (q.get("temp") !== null) $("temp").value = q.get("temp");
if (q.get("max_tokens") !== null) $("maxtok").value = q.get("max_tokens");
if (q.get("q")) send(q.get("q"));
</script>
</body>
</html>
)HTML";

}  // namespace serve
