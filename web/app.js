// lpx web UI: the API key, the model's name and the dashboard fed by the server's
// own /metrics. The chat playground is chat.js.
"use strict";

const $ = (id) => document.getElementById(id);
let modelId = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

$("api-key").value = localStorage.getItem("lpx-api-key") || "";
$("api-key").addEventListener("change", () => {
  localStorage.setItem("lpx-api-key", $("api-key").value.trim());
  loadModel();
});

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
    modelId = j.data[0].id;
    $("model-name").textContent = modelId + " · max_model_len " + j.data[0].max_model_len;
  } catch (e) {
    $("model-name").textContent = "model: " + e.message;
  }
}

// ---- dashboard ----------------------------------------------------------

// Prometheus text -> {name: [{labels, value}]}.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const kv of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    (out[m[1]] = out[m[1]] || []).push({ labels, value: parseFloat(m[4]) });
  }
  return out;
}

const first = (ms, name) => (ms[name] && ms[name].length ? ms[name][0].value : undefined);

// Quantile of a histogram from its cumulative buckets, interpolated linearly
// inside the bucket as Prometheus' histogram_quantile does.
function quantile(ms, name, q) {
  const b = (ms[name + "_bucket"] || []).map((s) => ({ le: parseFloat(s.labels.le), n: s.value }));
  if (!b.length || b[b.length - 1].n <= 0) return undefined;
  const rank = q * b[b.length - 1].n;
  let lo = 0, below = 0;
  for (const x of b) {
    if (x.n >= rank) {
      if (!isFinite(x.le)) return lo;
      return lo + (x.le - lo) * ((rank - below) / Math.max(x.n - below, 1e-9));
    }
    lo = x.le;
    below = x.n;
  }
  return lo;
}

const fmtS = (s) => (s === undefined ? "–" : s < 1 ? (s * 1000).toFixed(0) + " ms" : s.toFixed(2) + " s");
let prevMetrics = null, prevTime = 0, updates = 0;
const series = [];

function drawChart() {
  const c = $("dash-chart"), g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  const max = Math.max(1, ...series);
  g.strokeStyle = "#6ea8fe";
  g.beginPath();
  series.forEach((v, i) => {
    const x = (i / 119) * c.width, y = c.height - 4 - (v / max) * (c.height - 8);
    i ? g.lineTo(x, y) : g.moveTo(x, y);
  });
  g.stroke();
  g.fillStyle = "#8a90a0";
  g.fillText("max " + max.toFixed(1) + " tok/s", 6, 12);
}

function gpuCards(ms) {
  const names = Object.keys(ms).filter((n) => n.startsWith("lpx:gpu_"));
  const box = $("gpu-cards");
  if (!names.length) return;
  box.textContent = "";
  for (const n of names)
    for (const s of ms[n]) {
      const card = document.createElement("div");
      card.className = "card";
      const label = n.slice(8).replace(/_/g, " ") + (s.labels.gpu !== undefined ? " (gpu " + s.labels.gpu + ")" : "");
      card.innerHTML = '<div class="label"></div><div class="value"></div>';
      card.firstChild.textContent = label;
      card.lastChild.textContent = Number.isInteger(s.value) ? s.value : s.value.toFixed(1);
      box.appendChild(card);
    }
}

async function poll() {
  try {
    const r = await fetch("/metrics", { headers: headers() });
    const ms = parseMetrics(await r.text());
    const now = performance.now();
    const gen = first(ms, "lpx:generation_tokens_total");
    if (prevMetrics) {
      const dt = (now - prevTime) / 1000;
      const tps = Math.max(0, (gen - first(prevMetrics, "lpx:generation_tokens_total")) / dt);
      $("dash-tokps").textContent = tps.toFixed(1);
      series.push(tps);
      if (series.length > 120) series.shift();
      drawChart();
    }
    $("dash-ttft50").textContent = fmtS(quantile(ms, "lpx:time_to_first_token_seconds", 0.5));
    $("dash-ttft99").textContent = fmtS(quantile(ms, "lpx:time_to_first_token_seconds", 0.99));
    $("dash-running").textContent = first(ms, "lpx:num_requests_running");
    $("dash-waiting").textContent = first(ms, "lpx:num_requests_waiting");
    $("dash-kv").textContent = (100 * first(ms, "lpx:kv_cache_usage_perc")).toFixed(1) + " %";
    $("dash-gen").textContent = gen;
    $("dash-done").textContent = (ms["lpx:request_success_total"] || []).reduce((a, s) => a + s.value, 0);
    gpuCards(ms);
    prevMetrics = ms;
    prevTime = now;
    updates++;
    $("dash-updated").dataset.count = updates;
    $("dash-updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("dash-updated").textContent = "/metrics: " + e.message;
  }
  try {
    const h = await fetch("/health");
    $("health").textContent = h.ok ? "ready" : "draining";
    $("health").className = "pill " + (h.ok ? "ok" : "bad");
  } catch (e) {
    $("health").textContent = "down";
    $("health").className = "pill bad";
  }
}

loadModel();
poll();
setInterval(poll, 1000);
