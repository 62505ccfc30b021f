// page.cc: the web chat page (one HTML file with inline CSS and JS, no build step; the
// libraries it loads from /assets/ are Debian's, embedded by assets.cc). Conversations are
// kept in the browser (localStorage "shardlm_conversations": a list, new chat, delete,
// each with its own system prompt). Replies stream from /v1/chat/completions (fetch, SSE
// read by hand) and render as markdown (marked), sanitised (DOMPurify) with highlighted
// code (highlight.js); copy and regenerate buttons; a stop button (aborting the fetch frees
// the server at once); while queued, the server's ": waiting N" comments show the queue.
// A reply cut off by max tokens is marked (and stays marked after a reload); a stopped one
// too. A failed turn is not kept: its user message goes back into the input box, so the
// history the server sees never holds an empty or failed reply. Temperature, max tokens
// and the API key are kept in localStorage. ?q=TEXT sends TEXT on load in a new
// conversation (the headless tests); <body data-state> is "idle", "waiting", "streaming",
// "done" or "error"; the Nth reply of the conversation has id "answer-N" and its raw text
// in data-raw. A Cluster panel (toggled, remembered; ?cluster=1 opens it) draws /cluster
// every 2 s: the nodes, their states, shares and per-step times, the latest recovery.
// A reply's thought (reasoning_content deltas, reasoning.h) streams into a collapsed
// <details class="thought"> ("Thought") above the answer, as plain text; it is kept with the
// reply (as "reasoning") but not sent back to the server with the history.
#include "serve/page.h"

namespace serve {

const char* const kChatPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>shardlm chat</title>
<link rel="stylesheet" href="/assets/highlight.css">
<script src="/assets/marked.js"></script>
<script src="/assets/purify.js"></script>
<script src="/assets/highlight.js"></script>
<style>
  :root { --bg:#f6f7f9; --fg:#1d2330; --muted:#6b7280; --user:#dbeafe; --bot:#ffffff; --accent:#2563eb; --line:#e5e7eb; }
  * { box-sizing: border-box; }
  body { margin:0; font:15px/1.5 system-ui, sans-serif; background:var(--bg); color:var(--fg);
         display:flex; height:100vh; }
  nav { width:14em; background:#fff; border-right:1px solid var(--line); display:flex; flex-direction:column; }
  nav button#new { margin:.6em; padding:.4em; }
  #convs { flex:1; overflow-y:auto; }
  .conv { display:flex; align-items:center; padding:.35em .6em; cursor:pointer; font-size:.9em; }
  .conv span { flex:1; overflow:hidden; white-space:nowrap; text-overflow:ellipsis; }
  .conv.current { background:var(--user); }
  .conv .del { border:none; background:none; color:var(--muted); padding:0 .3em; }
  main { flex:1; display:flex; flex-direction:column; min-width:0; }
  header { display:flex; gap:1em; align-items:center; padding:.6em 1em; background:#fff; border-bottom:1px solid var(--line); flex-wrap:wrap; }
  header h1 { font-size:1.05em; margin:0 1em 0 0; }
  header label { color:var(--muted); font-size:.9em; }
  header input { width:5.5em; margin-left:.3em; }
  #key { width:10em; }
  #system { width:100%; font:inherit; font-size:.9em; padding:.3em; resize:vertical; height:2.2em; }
  #log { flex:1; overflow-y:auto; padding:1em; display:flex; flex-direction:column; gap:.7em; }
  .msg { max-width:48em; padding:.6em .9em; border-radius:10px; word-wrap:break-word; box-shadow:0 1px 2px rgba(0,0,0,.06); }
  .user { align-self:flex-end; background:var(--user); white-space:pre-wrap; }
  .assistant { align-self:flex-start; background:var(--bot); }
  .assistant .body > :first-child { margin-top:0; } .assistant .body > :last-child { margin-bottom:0; }
  .assistant pre { background:#f6f8fa; padding:.6em; border-radius:6px; overflow-x:auto; }
  .assistant code { font-size:.92em; }
  .tools { margin-top:.3em; display:flex; gap:.4em; align-items:center; font-size:.8em; color:var(--muted); }
  .tools button { font-size:1em; padding:0 .6em; background:#fff; color:var(--accent); }
  .mark { color:#b45309; }
  .thought { margin-bottom:.4em; color:var(--muted); font-size:.9em; }
  .thought summary { cursor:pointer; }
  .thought .text { white-space:pre-wrap; border-left:2px solid var(--line); padding-left:.6em; margin-top:.3em; }
  .error { align-self:center; color:#b91c1c; }
  footer { display:flex; gap:.5em; padding:.7em 1em; background:#fff; border-top:1px solid var(--line); }
  textarea#input { flex:1; resize:none; height:3.2em; font:inherit; padding:.4em; }
  button { font:inherit; padding:0 1.2em; border-radius:6px; border:1px solid var(--accent); background:var(--accent); color:#fff; cursor:pointer; }
  button:disabled { opacity:.4; cursor:default; }
  #stop { background:#fff; color:var(--accent); }
  #speed { color:var(--muted); font-size:.9em; margin-left:auto; }
  #clusterbtn { background:#fff; color:var(--accent); padding:0 .8em; }
  aside#cluster { width:58em; flex-shrink:0; background:#fff; border-left:1px solid var(--line); padding:.6em .8em; overflow:auto; font-size:.85em; }
  aside#cluster[hidden] { display:none; }
  aside#cluster h2 { font-size:1.05em; margin:.2em 0 .4em; }
  aside#cluster table { border-collapse:collapse; width:100%; }
  aside#cluster th, aside#cluster td { border-bottom:1px solid var(--line); padding:.25em .35em; text-align:right; white-space:nowrap; }
  aside#cluster th:first-child, aside#cluster td:first-child { text-align:left; }
  aside#cluster .st-ok { color:#15803d; } aside#cluster .st-lost { color:#b91c1c; font-weight:bold; } aside#cluster .st-rejoined { color:#b45309; }
  aside#cluster tr.lost td { color:var(--muted); }
  #clustersum, #clusterlast { color:var(--muted); margin:.4em 0; white-space:normal; }
</style>
</head>
<body data-state="idle">
<nav>
  <button id="new">+ New chat</button>
  <div id="convs"></div>
</nav>
<main>
<header>
  <h1>shardlm chat</h1>
  <label>temperature <input id="temp" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="maxtok" type="number" min="1" step="1" value="256"></label>
  <label>API key <input id="key" type="password" placeholder="(if required)"></label>
  <span id="speed"></span>
  <button id="clusterbtn" title="the cluster's nodes, live (GET /cluster)">Cluster</button>
  <textarea id="system" placeholder="System prompt for this conversation (optional)"></textarea>
</header>
<div id="log"></div>
<footer>
  <textarea id="input" placeholder="Type a message; Enter sends, Shift+Enter adds a line"></textarea>
  <button id="send">Send</button>
  <button id="stop" disabled>Stop</button>
</footer>
</main>
<aside id="cluster" hidden>
  <h2>Cluster <span id="clusterstatus"></span></h2>
  <div id="clustersum"></div>
  <table><thead><tr><th>node</th><th>state</th><th>share</th><th>MiB</th><th title="compute, ms per token (a row of a step: a prompt token or a decoded one)">compute ms</th>
    <th title="sync (all-reduces), ms per token">sync ms</th><th>sent MB</th><th>recv MB</th><th title="token rows computed">tokens</th><th>steps</th>
    <th title="the root's link to the node: latency alpha, from the link probe when the cluster formed">link &micro;s</th><th>device</th></tr></thead>
    <tbody id="clusterrows"></tbody></table>
  <div id="clusterlast"></div>
</aside>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const STORE = "shardlm_conversations", CURRENT = "shardlm_current";
let convs = [];
try { convs = JSON.parse(localStorage.getItem(STORE) || "[]"); } catch (e) { convs = []; }
let current = localStorage.getItem(CURRENT);
let controller = null;

function save() {
  localStorage.setItem(STORE, JSON.stringify(convs));
  if (current) localStorage.setItem(CURRENT, current);
}
function conv() { return convs.find((c) => c.id === current); }
function newConv() {
  const c = {id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", system: "",
             messages: []};
  convs.unshift(c);
  current = c.id;
  save();
  return c;
}

// Markdown to sanitised HTML with highlighted code blocks.
function renderMarkdown(el, text) {
  el.innerHTML = DOMPurify.sanitize(marked.parse(text));
  el.querySelectorAll("pre code").forEach((b) => hljs.highlightBlock(b));
}

function scrollDown() { $("log").scrollTop = $("log").scrollHeight; }

// The collapsed "Thought" block of a reply's bubble (made on first use), its text set.
function showThought(d, text) {
  let t = d.querySelector(".thought");
  if (!t) {
    t = document.createElement("details");
    t.className = "thought";
    t.innerHTML = "<summary>Thought</summary><div class=\"text\"></div>";
    d.insertBefore(t, d.firstChild);
  }
  t.querySelector(".text").textContent = text;
}

function bubble(m, index) {
  const d = document.createElement("div");
  d.className = "msg " + m.role;
  if (m.role === "user") {
    d.textContent = m.content;
  } else {
    const c = conv();
    d.id = "answer-" + ((c ? c.messages.slice(0, index).filter((x) => x.role === "assistant").length : 0) + 1);
    d.dataset.raw = m.content;
    const body = document.createElement("div");
    body.className = "body";
    renderMarkdown(body, m.content);
    d.appendChild(body);
    if (m.reasoning) showThought(d, m.reasoning);
    const tools = document.createElement("div");
    tools.className = "tools";
    if (m.mark) {
      const s = document.createElement("span");
      s.className = "mark " + (m.mark === "length" ? "cut" : "stopped");
      s.textContent = m.mark === "length" ? "cut off at max tokens" : "stopped";
      tools.appendChild(s);
    }
    const copy = document.createElement("button");
    copy.textContent = "Copy";
    copy.className = "copy";
    copy.onclick = () => navigator.clipboard && navigator.clipboard.writeText(d.dataset.raw);
    tools.appendChild(copy);
    if (c && index === c.messages.length - 1) {
      const regen = document.createElement("button");
      regen.textContent = "Regenerate";
      regen.className = "regen";
      regen.onclick = regenerate;
      tools.appendChild(regen);
    }
    d.appendChild(tools);
  }
  $("log").appendChild(d);
  return d;
}

function showConv() {
  const c = conv();
  $("log").innerHTML = "";
  $("system").value = c ? c.system : "";
  if (c) c.messages.forEach((m, i) => bubble(m, i));
  const list = $("convs");
  list.innerHTML = "";
  for (const x of convs) {
    const row = document.createElement("div");
    row.className = "conv" + (x.id === current ? " current" : "");
    const t = document.createElement("span");
    t.textContent = x.title;
    row.appendChild(t);
    const del = document.createElement("button");
    del.className = "del";
    del.textContent = "\u00d7";
    del.title = "delete";
    del.onclick = (e) => {
      e.stopPropagation();
      convs = convs.filter((y) => y.id !== x.id);
      if (current === x.id) current = convs.length ? convs[0].id : null;
      save();
      showConv();
    };
    row.appendChild(del);
    row.onclick = () => { if (!controller) { current = x.id; save(); showConv(); } };
    list.appendChild(row);
  }
  scrollDown();
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  $("new").disabled = busy;
}

// Streams a reply to the conversation as it stands (its last message is the user's).
async function reply() {
  const c = conv();
  const messages = (c.system.trim() ? [{role: "system", content: c.system}] : [])
      .concat(c.messages.map((m) => ({role: m.role, content: m.content})));
  const index = c.messages.length;
  const out = bubble({role: "assistant", content: ""}, index);
  const body = out.querySelector(".body");
  body.textContent = "\u2026";
  const req = {
    messages, stream: true, stream_options: {include_usage: true},
    temperature: parseFloat($("temp").value), max_tokens: parseInt($("maxtok").value, 10)
  };
  const headers = {"Content-Type": "application/json"};
  if ($("key").value) headers["Authorization"] = "Bearer " + $("key").value;
  controller = new AbortController();
  setBusy(true);
  document.body.dataset.state = "waiting";
  let answer = "", thought = "", tokens = 0, chunks = 0, t0 = 0, finish = null, failed = null, drawn = false;
  const draw = () => { drawn = false; renderMarkdown(body, answer); out.dataset.raw = answer; scrollDown(); };
  try {
    const res = await fetch("/v1/chat/completions", {method: "POST", headers, body: JSON.stringify(req),
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
          if (line.startsWith(": waiting")) {
            const n = parseInt(line.slice(9), 10);
            body.textContent = "waiting for a free slot" + (n > 0 ? " (" + n + " request" + (n > 1 ? "s" : "") +
                               " queued)" : "") + "\u2026";
            continue;
          }
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          if (j.usage) tokens = j.usage.completion_tokens;
          const ch = j.choices && j.choices[0];
          if (ch && ch.finish_reason) finish = ch.finish_reason;
          if (ch && ch.delta && (ch.delta.content || ch.delta.reasoning_content)) {
            if (!t0) { t0 = performance.now(); document.body.dataset.state = "streaming"; }
            chunks++;
            if (ch.delta.reasoning_content) {
              thought += ch.delta.reasoning_content;
              showThought(out, thought);
            }
            if (ch.delta.content) {
              answer += ch.delta.content;
              if (!drawn) { drawn = true; requestAnimationFrame(draw); }
            }
          }
        }
      }
      const s = t0 ? (performance.now() - t0) / 1000 : 0;
      if (chunks > 1 && s > 0) $("speed").textContent = ((chunks - 1) / s).toFixed(1) + " tokens/s";
    }
    const s = t0 ? (performance.now() - t0) / 1000 : 0;
    if (tokens > 1 && s > 0) $("speed").textContent = tokens + " tokens, " + ((tokens - 1) / s).toFixed(1) + " tokens/s";
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else failed = e.message;
  }
  controller = null;
  setBusy(false);
  if (failed !== null || (finish !== "stopped" && !answer && !thought)) {
    // Not kept: the user's message goes back into the input box.
    const user = c.messages.pop();
    save();
    showConv();
    if (user && user.role === "user") $("input").value = user.content;
    const err = document.createElement("div");
    err.className = "msg error";
    err.textContent = "error: " + (failed !== null ? failed : "the server sent no reply");
    $("log").appendChild(err);
    document.body.dataset.state = "error";
    return;
  }
  c.messages.push({role: "assistant", content: answer, reasoning: thought || undefined, mark: finish === "length" || finish === "stopped" ? finish : undefined});
  save();
  showConv();
  document.body.dataset.state = "done";
}

function send(text) {
  text = text.trim();
  if (!text || controller) return;
  const c = conv() || newConv();
  if (!c.messages.length) c.title = text.slice(0, 40);
  c.messages.push({role: "user", content: text});
  save();
  showConv();
  return reply();
}

function regenerate() {
  const c = conv();
  if (controller || !c || !c.messages.length || c.messages[c.messages.length - 1].role !== "assistant") return;
  c.messages.pop();
  save();
  showConv();
  return reply();
}

for (const [id, k] of [["key", "shardlm_key"], ["temp", "shardlm_temp"], ["maxtok", "shardlm_maxtok"]]) {
  if (localStorage.getItem(k) !== null) $(id).value = localStorage.getItem(k);
  $(id).addEventListener("change", () => localStorage.setItem(k, $(id).value));
}
$("system").addEventListener("change", () => { const c = conv() || newConv(); c.system = $("system").value; save(); });
$("new").addEventListener("click", () => { if (!controller) { newConv(); showConv(); } });
$("send").addEventListener("click", () => { const t = $("input").value; $("input").value = ""; send(t); });
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("send").click(); }
});
if (!conv()) current = convs.length ? convs[0].id : null;
showConv();
// The cluster panel: GET /cluster every 2 s while it is open. Each row is a node
// (tr[data-node], data-state), each number cell keeps the value as served in data-v (the
// same as /metrics); <aside> data-polls counts the answers drawn, data-status the last one's.
let clusterTimer = null;
async function pollCluster() {
  const panel = $("cluster");
  try {
    const res = await fetch("/cluster", {cache: "no-store"});
    const j = await res.json();
    $("clusterstatus").textContent = "(" + j.status + ": " + j.nodes_now + " of " + j.nodes_planned + " nodes, " +
                                     j.recoveries + " recoveries)";
    $("clustersum").textContent = j.summary || "";
    $("clusterlast").textContent = j.last_recovery ? "last recovery: " + j.last_recovery : "no recovery";
    const rows = $("clusterrows");
    rows.textContent = "";
    const cols = [["share", 3, 1], ["memory_bytes", 1, 1 / 1048576], ["compute_ms_per_token", 3, 1],
                  ["sync_ms_per_token", 3, 1], ["bytes_sent", 3, 1e-6], ["bytes_received", 3, 1e-6], ["rows", 0, 1],
                  ["steps", 0, 1],
                  ["link_latency_us", 1, 1]];
    for (const n of j.nodes) {
      const tr = document.createElement("tr");
      tr.dataset.node = n.name;
      tr.dataset.state = n.state;
      tr.className = n.state;
      const name = document.createElement("td");
      name.textContent = n.name;
      name.title = n.device ? "device: " + n.device : "";
      tr.appendChild(name);
      const st = document.createElement("td");
      st.textContent = n.state;
      st.className = "st-" + n.state;
      tr.appendChild(st);
      for (const [k, digits, scale] of cols) {
        const td = document.createElement("td");
        td.dataset.k = k;
        if (typeof n[k] === "number") {
          td.dataset.v = String(n[k]);
          td.textContent = (n[k] * scale).toFixed(digits);
        } else {
          td.textContent = "-";
        }
        tr.appendChild(td);
      }
      const dev = document.createElement("td");
      dev.dataset.k = "device";
      dev.textContent = n.device || "-";
      dev.style.textAlign = "left";
      tr.appendChild(dev);
      rows.appendChild(tr);
    }
    panel.dataset.status = j.status;
    panel.dataset.recoveries = j.recoveries;
  } catch (e) {
    $("clusterstatus").textContent = "(unreachable)";
    panel.dataset.status = "unreachable";
  }
  panel.dataset.polls = String(Number(panel.dataset.polls || 0) + 1);
}
function showCluster(on) {
  $("cluster").hidden = !on;
  localStorage.setItem("shardlm_cluster", on ? "1" : "0");
  clearInterval(clusterTimer);
  clusterTimer = null;
  if (on) { pollCluster(); clusterTimer = setInterval(pollCluster, 2000); }
}
$("clusterbtn").addEventListener("click", () => showCluster($("cluster").hidden));
const q = new URLSearchParams(location.search);
showCluster(q.get("cluster") === "1" || (q.get("cluster") === null && localStorage.getItem("shardlm_cluster") === "1"));
if (q.get("temp") !== null) $("temp").value = q.get("temp");
if (q.get("max_tokens") !== null) $("maxtok").value = q.get("max_tokens");
if (q.get("q")) { newConv(); send(q.get("q")); }
</script>
</body>
</html>
)HTML";

}  // namespace serve
