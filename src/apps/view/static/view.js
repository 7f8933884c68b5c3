// arthex view: the page. Plain JS, no build step. Every value from a run is put into the
// page as text (textContent / createTextNode), never as HTML.
"use strict";

const POLL_MS = 2000;
const main = document.getElementById("main");
let timer = null;      // the current page's poll
let charts = [];       // uPlot instances of the current page

// --- small helpers ---------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value, digits = 4) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") {
    if (Number.isInteger(value)) return String(value);
    return Number(value.toPrecision(digits)).toString();
  }
  return String(value);
}

function size(bytes) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return unit ? `${value.toFixed(1)} ${units[unit]}` : `${value} B`;
}

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleString();
}

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
  return `${(s / 86400).toFixed(1)} days ago`;
}

async function api(path, params) {
  const url = new URL(path, window.location.href);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
  }
  const response = await fetch(url, { credentials: "same-origin" });
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  const live = document.getElementById("live");
  live.classList.toggle("stale", !response.ok);
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  live.textContent = "live";
  return body;
}

function runPath(project, name) {
  return `api/runs/${encodeURIComponent(project)}/${encodeURIComponent(name)}`;
}

function errorsBox(errors) {
  if (!errors || !errors.length) return el("div", { class: "errors-none" });
  return el("div", { class: "errors", role: "alert" },
    el("b", {}, "Some files could not be read (the rest is shown):"),
    errors.map((e) => el("div", { class: "error-line" }, e)));
}

function crumbs(...items) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(...items.map(([text, href]) =>
    href ? el("a", { href }, text) : el("span", {}, text)));
}

function setPoll(fn) {
  if (timer) clearInterval(timer);
  timer = setInterval(() => fn().catch(showPollError), POLL_MS);
}

function showPollError(error) {
  const live = document.getElementById("live");
  live.classList.add("stale");
  live.textContent = `not updating: ${error.message}`;
}

function parseHash() {
  const raw = window.location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

function go(hash) {
  if (window.location.hash === hash) route();
  else window.location.hash = hash;
}

function runHash(project, name, tab, params) {
  const base = `#/run/${encodeURIComponent(project)}/${encodeURIComponent(name)}`;
  const query = params ? `?${new URLSearchParams(params)}` : "";
  return tab ? `${base}/${tab}${query}` : `${base}${query}`;
}

// --- routing ---------------------------------------------------------------------------------

async function route() {
  if (timer) clearInterval(timer);
  timer = null;
  for (const chart of charts) chart.destroy();
  charts = [];
  const { parts, params } = parseHash();
  main.replaceChildren(el("p", { class: "muted" }, "loading..."));
  try {
    if (parts[0] === "run" && parts.length >= 3) {
      const [, project, name, tab] = parts;
      if (tab === "trajectories") await trajectoriesPage(project, name, params);
      else if (tab === "checkpoints") await checkpointsPage(project, name, params);
      else await metricsPage([[project, name]], params, true);
    } else if (parts[0] === "compare") {
      const runs = (params.get("runs") || "").split(",").filter(Boolean).map((r) => r.split("/"));
      await metricsPage(runs, params, false);
    } else {
      await runsPage(params);
    }
  } catch (error) {
    main.replaceChildren(el("div", { class: "errors", role: "alert" }, el("div", {}, error.message)));
  }
}

window.addEventListener("hashchange", route);

// --- runs ------------------------------------------------------------------------------------

async function runsPage(params) {
  crumbs(["runs", "#/"]);
  const metric = params.get("metric") || "";
  const direction = params.get("direction") || "max";
  const selected = new Set();
  const body = el("tbody");
  const count = el("span", { class: "muted" });
  const compare = el("button", {
    id: "compare", disabled: true,
    onclick: () => go(`#/compare?runs=${[...selected].join(",")}`),
  }, "compare selected");
  const metricInput = el("input", { id: "metric", value: metric, placeholder: "val/reward", size: 16 });
  const directionSelect = el("select", { id: "direction" },
    ["max", "min"].map((d) => el("option", { value: d, selected: d === direction }, d)));
  const apply = () => go(`#/?metric=${encodeURIComponent(metricInput.value)}&direction=${directionSelect.value}`);
  metricInput.addEventListener("change", apply);
  directionSelect.addEventListener("change", apply);
  const errors = el("div");
  main.replaceChildren(
    el("h1", {}, "Runs ", count),
    el("div", { class: "controls" },
      el("label", {}, "best by", metricInput), el("label", {}, "direction", directionSelect), compare),
    errors,
    el("table", { id: "runs" },
      el("thead", {}, el("tr", {}, ["", "run", "step", "last update", "best", "trainer", "checkpoints", "base model"]
        .map((h) => el("th", {}, h)))),
      body));

  async function refresh() {
    const data = await api("api/runs", { metric, direction });
    count.textContent = `(${data.runs.length})`;
    const allErrors = [];
    body.replaceChildren(...data.runs.map((run) => {
      const key = `${run.project}/${run.name}`;
      allErrors.push(...run.errors.map((e) => `${key}: ${e}`));
      const box = el("input", {
        type: "checkbox", checked: selected.has(key), "aria-label": `select ${key}`,
        onchange: (event) => {
          if (event.target.checked) selected.add(key); else selected.delete(key);
          compare.disabled = selected.size === 0;
        },
      });
      const best = run.best
        ? `${run.best.metric} ${fmt(run.best.value)} @ step ${run.best.step}` : "";
      const lease = run.lease
        ? (run.lease.alive === false ? `left by pid ${run.lease.pid} (gone)` : `pid ${run.lease.pid} on ${run.lease.host}`)
        : "";
      return el("tr", { "data-run": key },
        el("td", {}, box),
        el("td", {}, el("a", { href: runHash(run.project, run.name), class: "run-link" }, key)),
        el("td", { class: "num" }, fmt(run.step)),
        el("td", { title: when(run.updated) }, run.updated ? `${when(run.updated)} (${ago(run.updated)})` : ""),
        el("td", {}, best),
        el("td", {}, lease),
        el("td", { class: "num" }, run.checkpoints_where === "tinker" ? `${run.checkpoints} (tinker${run.checkpoints_expired ? `, ${run.checkpoints_expired} expired` : ""})` : fmt(run.checkpoints)),
        el("td", { class: "muted" }, run.base_model || ""));
    }));
    errors.replaceChildren(errorsBox(allErrors));
  }
  await refresh();
  setPoll(refresh);
}

// --- metrics ---------------------------------------------------------------------------------

function runHeader(project, name, tab) {
  const step = el("b", { id: "run-step" });
  const updated = el("b", { id: "run-updated" });
  const trainer = el("span", { id: "run-trainer" });
  const tabs = el("nav", { class: "tabs" },
    [["metrics", ""], ["trajectories", "trajectories"], ["checkpoints", "checkpoints"]].map(([label, t]) =>
      el("a", { href: runHash(project, name, t), class: t === tab ? "on" : "", id: `tab-${label}` }, label)));
  const errors = el("div");
  const node = el("div", {},
    el("h1", {}, `${project}/${name}`),
    el("div", { class: "status" },
      el("span", {}, "latest step ", step), el("span", {}, "last update ", updated), trainer),
    errors, tabs);
  async function refresh() {
    const data = await api("api/runs");
    const run = data.runs.find((r) => r.project === project && r.name === name);
    if (!run) throw new Error(`run ${project}/${name} is no longer under the viewed paths`);
    step.textContent = fmt(run.step);
    updated.textContent = run.updated ? `${when(run.updated)} (${ago(run.updated)})` : "never";
    trainer.textContent = run.lease && run.lease.alive !== false ? `trainer: pid ${run.lease.pid} on ${run.lease.host}` : "";
    errors.replaceChildren(errorsBox(run.errors));
    return run;
  }
  return { node, refresh };
}

const STEP_TICKS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
const SERIES_COLORS = ["#2b6cb0", "#dd6b20", "#2f855a", "#b83280", "#6b46c1", "#c53030", "#2c7a7b", "#975a16"];

function smooth(values, weight) {
  if (!weight) return values;
  let last = null;
  return values.map((v) => {
    if (v === null || v === undefined) return null;
    last = last === null ? v : last * weight + (1 - weight) * v;
    return last;
  });
}

// Per step: the mean of the rows that logged the key (as the retention policy reads it).
function stepMeans(rows, key, xAxis) {
  const sums = new Map();
  for (const row of rows) {
    const v = row[key];
    if (typeof v !== "number") continue;
    const s = sums.get(row.step) || { sum: 0, n: 0, t: row.recorded_at };
    s.sum += v; s.n += 1;
    if (row.recorded_at > s.t) s.t = row.recorded_at;
    sums.set(row.step, s);
  }
  return [...sums.entries()].sort((a, b) => a[0] - b[0]).map(([step, s]) => ({
    x: xAxis === "time" ? new Date(s.t).getTime() / 1000 : step, step, y: s.sum / s.n,
  }));
}

function metricKeys(rowsByRun) {
  const keys = new Set();
  for (const rows of rowsByRun) for (const row of rows) for (const k of Object.keys(row)) {
    if (k !== "step" && k !== "recorded_at") keys.add(k);
  }
  return [...keys];
}

// "train/reward" -> "reward": the same metric in every split, overlaid on one chart.
function suffix(key) { const i = key.indexOf("/"); return i < 0 ? key : key.slice(i + 1); }

function bestMarker(getBest) {
  return {
    hooks: {
      draw: [(u) => {
        const best = getBest();
        if (!best) return;
        const x = Math.round(u.valToPos(best.x, "x", true));
        const y = Math.round(u.valToPos(best.y, "y", true));
        const ctx = u.ctx;
        ctx.save();
        ctx.strokeStyle = "#c53030"; ctx.setLineDash([4, 4]); ctx.lineWidth = 1;
        ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
        ctx.setLineDash([]); ctx.fillStyle = "#c53030";
        ctx.beginPath(); ctx.arc(x, y, 5 * devicePixelRatio, 0, 2 * Math.PI); ctx.fill();
        ctx.font = `${12 * devicePixelRatio}px system-ui`;
        ctx.fillText(`best: step ${best.step}`, x + 6 * devicePixelRatio, u.bbox.top + 14 * devicePixelRatio);
        ctx.restore();
      }],
    },
  };
}

async function metricsPage(runs, params, single) {
  const [project, name] = runs[0] || [];
  let header = null;
  if (single) {
    crumbs(["runs", "#/"], [`${project}/${name}`, null]);
    header = runHeader(project, name, "");
  } else {
    crumbs(["runs", "#/"], [`compare ${runs.length} runs`, null]);
  }
  const state = runs.map(([p, n]) => ({ project: p, name: n, rows: [], next: 0, errors: [] }));
  async function pull() {
    let changed = false;
    for (const run of state) {
      const data = await api(`${runPath(run.project, run.name)}/history`, run.next ? { since: run.next } : {});
      if (data.rows.length) changed = true;
      run.rows.push(...data.rows);
      run.next = data.next;
      run.errors = data.errors;
    }
    return changed;
  }
  await pull();
  if (header) await header.refresh();
  const keys = metricKeys(state.map((r) => r.rows));
  const names = [...new Set(keys.map(suffix))].sort();
  let chosen = params.get("metric") || (names.includes("reward") ? "reward" : names[0]);
  let xAxis = params.get("x") || "step";
  let weight = Number(params.get("smooth") || 0);
  let direction = params.get("direction") || (/loss|error|exception/.test(chosen || "") ? "min" : "max");

  const metricSelect = el("select", { id: "metric-select" },
    names.map((k) => el("option", { value: k, selected: k === chosen }, k)));
  const xSelect = el("select", { id: "x-select" },
    ["step", "time"].map((k) => el("option", { value: k, selected: k === xAxis }, k)));
  const smoothInput = el("input", { id: "smooth", type: "range", min: 0, max: 0.95, step: 0.05, value: weight });
  const smoothLabel = el("span", { class: "muted" }, fmt(weight));
  const dirSelect = el("select", { id: "best-direction" },
    ["max", "min"].map((d) => el("option", { value: d, selected: d === direction }, d)));
  const bestText = el("span", { id: "best-text" });
  const rowsText = el("span", { id: "rows-count", class: "muted" });
  const chartBox = el("div", { class: "chart", id: "chart" });
  const errors = el("div");
  const lastRows = el("tbody", { id: "last-rows" });
  main.replaceChildren(
    header ? header.node : el("h1", {}, `Comparing ${state.map((r) => `${r.project}/${r.name}`).join(", ")}`),
    errors,
    el("div", { class: "controls" },
      el("label", {}, "metric", metricSelect), el("label", {}, "against", xSelect),
      el("label", {}, "smoothing", smoothInput, smoothLabel), el("label", {}, "best is", dirSelect),
      bestText, rowsText),
    chartBox,
    ...(single ? [el("h2", {}, "Latest history rows"), el("table", { id: "history-table" },
      el("thead", {}, el("tr", {}, ["step", "recorded", "values"].map((h) => el("th", {}, h)))),
      lastRows)] : []));

  let best = null;
  function series() {
    // One line per (run, split) that logged the chosen metric.
    const lines = [];
    for (const run of state) {
      const splitKeys = metricKeys([run.rows]).filter((k) => suffix(k) === chosen).sort();
      for (const key of splitKeys) {
        lines.push({ label: single ? key : `${run.project}/${run.name} ${key}`, points: stepMeans(run.rows, key, xAxis), key, run });
      }
    }
    return lines;
  }
  function build() {
    for (const chart of charts) chart.destroy();
    charts = [];
    const lines = series();
    const xs = [...new Set(lines.flatMap((l) => l.points.map((p) => p.x)))].sort((a, b) => a - b);
    const data = [xs];
    best = null;
    const sign = direction === "min" ? -1 : 1;
    for (const line of lines) {
      const at = new Map(line.points.map((p) => [p.x, p.y]));
      data.push(smooth(xs.map((x) => (at.has(x) ? at.get(x) : null)), weight));
      for (const p of line.points) {
        if (!best || sign * p.y > sign * best.y || (p.y === best.y && p.step > best.step)) best = { ...p, label: line.label };
      }
    }
    bestText.textContent = best ? `best ${best.label}: ${fmt(best.y)} at step ${best.step}` : "";
    const width = Math.max(320, chartBox.clientWidth - 16);
    const opts = {
      width, height: Math.min(420, Math.max(260, Math.round(width * 0.35))),
      title: chosen ? `${chosen} against ${xAxis}` : "no metrics logged yet",
      scales: { x: { time: xAxis === "time" } },
      // Steps are whole numbers: ticks at 1, 2, 5, 10, ... apart, never between two steps.
      axes: [xAxis === "time" ? { label: "time" } : { label: "step", incrs: STEP_TICKS },
        { label: chosen || "" }],
      series: [{ label: xAxis }, ...lines.map((l, i) => ({
        label: l.label, stroke: SERIES_COLORS[i % SERIES_COLORS.length], width: 2,
        // Against step, a step a split did not log is a gap; against time, or across runs,
        // the x values of one line are not those of the others: join its own points.
        points: { show: xs.length < 60 }, spanGaps: xAxis === "time" || !single,
        value: (u, v) => (v === null || v === undefined ? "-" : fmt(v)),
      }))],
      plugins: [bestMarker(() => best)],
    };
    charts.push(new uPlot(opts, data, chartBox));
    rowsText.textContent = `${state.reduce((n, r) => n + r.rows.length, 0)} history rows`;
    // A single run's header already names its damaged files (its history's among them).
    errors.replaceChildren(errorsBox(single ? [] : state.flatMap((r) => r.errors)));
    if (single) {
      const rows = state[0].rows.slice(-8).reverse();
      lastRows.replaceChildren(...rows.map((row) => el("tr", {},
        el("td", { class: "num" }, fmt(row.step)), el("td", {}, when(row.recorded_at)),
        el("td", { class: "kv" }, Object.entries(row).filter(([k]) => !["step", "training_step", "recorded_at"].includes(k))
          .map(([k, v]) => `${k}=${fmt(v)}`).join("  ")))));
    }
  }
  function rebuild() {
    const q = new URLSearchParams({ metric: chosen, x: xAxis, smooth: weight, direction });
    history.replaceState(null, "", single ? runHash(project, name, "", q) : `#/compare?runs=${runs.map((r) => r.join("/")).join(",")}&${q}`);
    build();
  }
  metricSelect.addEventListener("change", () => { chosen = metricSelect.value; rebuild(); });
  xSelect.addEventListener("change", () => { xAxis = xSelect.value; rebuild(); });
  dirSelect.addEventListener("change", () => { direction = dirSelect.value; rebuild(); });
  smoothInput.addEventListener("input", () => { weight = Number(smoothInput.value); smoothLabel.textContent = fmt(weight); build(); });
  build();
  setPoll(async () => {
    if (header) await header.refresh();
    if (await pull()) {
      const known = new Set([...metricSelect.options].map((o) => o.value));
      for (const k of metricKeys(state.map((r) => r.rows)).map(suffix)) {
        if (!known.has(k)) { known.add(k); metricSelect.append(el("option", { value: k }, k)); }
      }
      if (!chosen && metricSelect.value) chosen = metricSelect.value;
      build();
    }
  });
}

// --- trajectories ----------------------------------------------------------------------------

function tokenSpan(token) {
  // Shade by probability: white at p = 1, red as the sampled token gets less likely.
  const p = token.logprob === null ? 1 : Math.exp(token.logprob);
  const span = el("span", { class: "tok", title: `logprob ${fmt(token.logprob)}  p=${fmt(p, 3)}` }, token.token);
  span.style.backgroundColor = `rgba(220, 38, 38, ${(1 - p) * 0.6})`;
  return span;
}

function messageNode(message, showTokens) {
  const role = message.tool_call_id ? `${message.role} [${message.tool_call_id}]` : message.role;
  const classes = ["msg", message.trainable ? "trainable" : "", message.role === "tool" ? "tool" : ""].join(" ");
  const tokens = showTokens && message.tokens ? message.tokens : null;
  // Tokens that spell the text are shaded in place; others (ids without text) go below it.
  const spelled = tokens && tokens.map((t) => t.token).join("") === message.content;
  const text = spelled
    ? el("div", { class: "text tokens" }, tokens.map(tokenSpan))
    : el("div", { class: "text" }, message.content);
  return el("div", { class: classes },
    el("div", { class: "role" }, role, message.trainable ? " · trainable" : ""),
    message.content || spelled ? text : null,
    tokens && !spelled ? el("div", { class: "text tokens sampled" }, tokens.map(tokenSpan)) : null,
    message.tool_calls.map((c) => el("div", { class: "call" }, `→ ${c.name}(${c.arguments})`)));
}

function kv(values) {
  const entries = Object.entries(values || {});
  if (!entries.length) return null;
  return el("div", { class: "kv" }, entries.map(([k, v]) => `${k}=${fmt(v)}`).join("  "));
}

function conversationText(trajectory) {
  return trajectory.messages.map((m) => {
    const calls = m.tool_calls.map((c) => `  -> ${c.name}(${c.arguments})`).join("\n");
    return `${m.role}: ${m.content}${calls ? `\n${calls}` : ""}`;
  }).join("\n").split("\n");
}

// A line diff (longest common subsequence) of two conversations.
function diffLines(a, b) {
  const n = a.length, m = b.length;
  const dp = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) {
    dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
    else if (dp[i + 1][j] >= dp[i][j + 1]) out.push(["-", a[i++]]);
    else out.push(["+", b[j++]]);
  }
  while (i < n) out.push(["-", a[i++]]);
  while (j < m) out.push(["+", b[j++]]);
  return out;
}

function scenarioText(group) {
  const t = group.trajectories[0];
  if (!t) return "";
  const user = t.messages.find((m) => m.role === "user");
  return user ? user.content.slice(0, 200) : "";
}

async function trajectoriesPage(project, name, params) {
  crumbs(["runs", "#/"], [`${project}/${name}`, runHash(project, name)], ["trajectories", null]);
  const header = runHeader(project, name, "trajectories");
  await header.refresh();
  const offset = Number(params.get("offset") || 0);
  const limit = Number(params.get("limit") || 10);
  const query = params.get("q") || "";
  const requested = { split: params.get("split"), step: params.get("step"), offset, limit, q: query };
  const data = await api(`${runPath(project, name)}/trajectories`, requested);
  const follow = !params.get("step");
  const sort = params.get("sort") || "index";
  const minReward = params.get("min") || "";
  const tokens = params.get("tokens") === "1";

  const nav = (changes) => {
    const next = new URLSearchParams(params);
    for (const [k, v] of Object.entries(changes)) {
      if (v === null || v === "") next.delete(k); else next.set(k, v);
    }
    go(runHash(project, name, "trajectories", next));
  };
  const splitSelect = el("select", { id: "split-select", onchange: () => nav({ split: splitSelect.value, step: null, offset: 0 }) },
    Object.keys(data.splits).map((s) => el("option", { value: s, selected: s === data.split }, s)));
  const stepSelect = el("select", { id: "step-select", onchange: () => nav({ step: stepSelect.value, offset: 0 }) });
  function fillSteps(splits) {
    const steps = (splits[data.split] || []).slice().reverse();
    stepSelect.replaceChildren(...steps.map((s) => el("option", { value: s, selected: s === data.step }, `step ${s}`)));
  }
  fillSteps(data.splits);
  const search = el("input", { id: "search", type: "search", value: query, placeholder: "search this step", size: 24 });
  search.addEventListener("change", () => nav({ q: search.value, offset: 0 }));
  const sortSelect = el("select", { id: "sort", onchange: () => nav({ sort: sortSelect.value }) },
    [["index", "group order"], ["reward-desc", "mean reward, high first"], ["reward-asc", "mean reward, low first"], ["spread", "reward spread"]]
      .map(([v, label]) => el("option", { value: v, selected: v === sort }, label)));
  const minInput = el("input", { id: "min-reward", type: "number", step: "any", value: minReward, size: 6, placeholder: "any" });
  minInput.addEventListener("change", () => nav({ min: minInput.value }));
  const tokenBox = el("input", { id: "tokens", type: "checkbox", checked: tokens, onchange: () => nav({ tokens: tokenBox.checked ? "1" : null }) });
  const newer = el("span", { id: "newer-step", class: "muted" });
  const pages = Math.max(1, Math.ceil(data.total / limit));
  const page = Math.floor(offset / limit) + 1;

  const summary = data.step === null
    ? el("p", { class: "muted" }, "No trajectories logged yet.")
    : el("p", { id: "traj-summary" }, `${data.split} · step ${data.step} · ${data.total} group(s)${query ? ` matching “${query}”` : ""}`);

  const groups = data.groups.slice();
  const mean = (g) => (g.trajectories.length ? g.trajectories.reduce((s, t) => s + t.reward, 0) / g.trajectories.length : -Infinity);
  const spread = (g) => (g.trajectories.length ? Math.max(...g.trajectories.map((t) => t.reward)) - Math.min(...g.trajectories.map((t) => t.reward)) : -1);
  if (sort === "reward-desc") groups.sort((a, b) => mean(b) - mean(a));
  if (sort === "reward-asc") groups.sort((a, b) => mean(a) - mean(b));
  if (sort === "spread") groups.sort((a, b) => spread(b) - spread(a));
  const floor = minReward === "" ? -Infinity : Number(minReward);

  const detail = el("div", { id: "detail" });
  const groupNodes = groups.map((group) => {
    const rewards = group.trajectories.map((t) => t.reward);
    const shown = group.trajectories.filter((t) => t.reward >= floor);
    const diffButton = group.trajectories.length >= 2 ? el("button", {
      class: "diff-button",
      onclick: () => {
        const sorted = group.trajectories.slice().sort((a, b) => b.reward - a.reward);
        const hi = sorted[0], lo = sorted[sorted.length - 1];
        detail.replaceChildren(el("h2", {}, `Group ${group.index}: best (trajectory ${hi.index}, reward ${fmt(hi.reward)}) against worst (trajectory ${lo.index}, reward ${fmt(lo.reward)})`),
          el("div", { class: "diff", id: "diff" }, diffLines(conversationText(lo), conversationText(hi))
            .map(([op, line]) => el("div", { class: op === "+" ? "add" : op === "-" ? "del" : "" }, `${op} ${line}`))));
        detail.scrollIntoView();
      },
    }, "diff best / worst") : null;
    const acrossButton = el("button", {
      class: "across-button",
      onclick: () => acrossSteps(project, name, data, group, detail),
    }, "across steps");
    return el("section", { class: "group", "data-group": group.index },
      el("h3", {}, `group ${group.index}`,
        el("span", { class: "muted" }, `rewards ${rewards.map((r) => fmt(r, 3)).join(", ")}`),
        group.exceptions.length ? el("span", { class: "neg" }, `${group.exceptions.length} failed`) : null),
      kv(group.metadata), kv(group.metrics),
      el("div", { class: "controls" }, diffButton, acrossButton),
      shown.map((t) => el("div", { class: "traj", "data-trajectory": t.index },
        el("div", { class: "head" },
          el("b", {}, `#${t.index}`),
          el("span", {}, "reward ", el("b", {}, fmt(t.reward))),
          el("span", { class: t.advantage > 0 ? "pos" : t.advantage < 0 ? "neg" : "" }, `advantage ${fmt(t.advantage, 3)}`),
          t.tools.length ? el("span", { class: "muted" }, `tools: ${t.tools.join(", ")}`) : null,
          t.captured ? el("span", { class: "badge" }, "captured") : null),
        kv(t.metrics), kv(t.metadata),
        t.messages.map((m) => messageNode(m, tokens)),
        t.additional_histories.map((h, i) => el("details", {}, el("summary", {}, `additional history ${i}`),
          h.messages.map((m) => messageNode(m, tokens)))),
        t.logs.length ? el("details", {}, el("summary", {}, "logs"), el("div", { class: "text" }, t.logs.join("\n"))) : null)),
      group.exceptions.map((e) => el("details", { class: "exc" }, el("summary", {}, `${e.type}: ${e.message}`), el("div", { class: "text" }, e.traceback || ""))));
  });

  main.replaceChildren(
    header.node,
    errorsBox(data.errors),
    el("div", { class: "controls" },
      el("label", {}, "split", splitSelect), el("label", {}, "step", stepSelect), search,
      el("label", {}, "sort", sortSelect), el("label", {}, "reward ≥", minInput),
      el("label", {}, tokenBox, "tokens by logprob"), newer),
    summary,
    el("div", { class: "pager" },
      el("button", { id: "prev", disabled: offset <= 0, onclick: () => nav({ offset: Math.max(0, offset - limit) }) }, "‹ previous"),
      el("span", {}, `page ${page} of ${pages}`),
      el("button", { id: "next", disabled: offset + limit >= data.total, onclick: () => nav({ offset: offset + limit }) }, "next ›")),
    el("div", { class: "groups", id: "groups" }, groupNodes),
    detail);

  setPoll(async () => {
    const run = await header.refresh();
    fillSteps(run.splits);
    const steps = run.splits[data.split] || [];
    const latest = steps[steps.length - 1];
    if (latest !== undefined && latest !== data.step) {
      if (follow && latest > data.step) nav({ step: null });
      else newer.textContent = `step ${latest} is newer`;
    }
  });
}

async function acrossSteps(project, name, data, group, detail) {
  const text = scenarioText(group);
  const steps = (data.splits[data.split] || []).slice(-12);
  const rows = el("tbody");
  detail.replaceChildren(el("h2", {}, `The same scenario across steps (first user message: “${text.slice(0, 80)}”)`),
    el("table", { id: "across" }, el("thead", {}, el("tr", {}, ["step", "groups", "rewards", "first reply"].map((h) => el("th", {}, h)))), rows));
  detail.scrollIntoView();
  for (const step of steps) {
    const found = await api(`${runPath(project, name)}/trajectories`, { split: data.split, step, q: text, limit: 1 });
    const g = found.groups[0];
    const reply = g && g.trajectories[0] ? (g.trajectories[0].messages.find((m) => m.role === "assistant") || { content: "" }).content : "";
    rows.append(el("tr", {}, el("td", { class: "num" }, step), el("td", { class: "num" }, found.total),
      el("td", {}, g ? g.trajectories.map((t) => fmt(t.reward, 3)).join(", ") : ""), el("td", { class: "text" }, reply.slice(0, 200))));
  }
}

// --- checkpoints -----------------------------------------------------------------------------

async function checkpointsPage(project, name, params) {
  crumbs(["runs", "#/"], [`${project}/${name}`, runHash(project, name)], ["checkpoints", null]);
  const header = runHeader(project, name, "checkpoints");
  const body = el("tbody");
  const reason = el("p", { id: "retention" });
  const pipelineBox = el("div", { id: "pipeline" });
  const errors = el("div");
  const metric = params.get("metric") || "";
  const direction = params.get("direction") || "max";
  main.replaceChildren(header.node, errors,
    el("h2", {}, "Checkpoints"), reason,
    el("table", { id: "checkpoints" }, el("thead", {}, el("tr", {},
      ["step", "metric (step mean)", "retention", "why", "size"].map((h) => el("th", {}, h)))), body),
    el("h2", {}, "Pipeline"), pipelineBox);
  async function refresh() {
    await header.refresh();
    const data = await api(`${runPath(project, name)}/checkpoints`, { metric, direction });
    errors.replaceChildren(errorsBox(data.errors));
    const where = { run: "in the run directory", tinker: "on the Tinker service", none: "none in the run directory" }[data.where];
    const live = data.checkpoints.filter((c) => !c.expired).length;
    const expired = data.checkpoints.length - live;
    reason.textContent = `${live} checkpoint(s), ${where}${expired ? ` (${expired} expired: their TTL passed)` : ""}. `
      + (data.retention ? `delete_checkpoints(best_checkpoint_metric="${data.metric}") would ${data.retention}.` : "No metric to decide retention by: delete_checkpoints would keep everything.")
      + (data.incomplete.length ? ` Incomplete folders: ${data.incomplete.join(", ")}.` : "");
    body.replaceChildren(...data.checkpoints.slice().reverse().map((c) => el("tr", { "data-step": c.step },
      el("td", { class: "num" }, c.step), el("td", { class: "num" }, fmt(c.metric)),
      el("td", {}, c.expired ? el("span", { class: "badge expired" }, "expired on Tinker")
        : el("span", { class: `badge ${c.kept ? "kept" : "gone"}` }, c.kept ? "kept" : "would be deleted")),
      el("td", {}, c.why.join(", ")),
      el("td", { class: "num" }, c.bytes === undefined ? "" : size(c.bytes)))));
    const p = data.pipeline;
    pipelineBox.replaceChildren(p ? el("table", {}, el("tbody", {},
      [["step", p.step], ["scenarios taken", p.offset], ["groups trained", p.trained_groups], ["pending", p.pending],
        ["discarded as stale", p.discarded.stale], ["discarded, zero variance", p.discarded.zero_variance],
        ["discarded, errored", p.discarded.errored], ["update in flight from step", p.in_flight],
        ["last evaluation at step", p.last_eval_step], ["best evaluation", p.best_eval ? `${fmt(p.best_eval[1])} at step ${p.best_eval[0]}` : ""]]
        .map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", { class: "num" }, fmt(v)))))) : el("p", { class: "muted" }, "No pipeline record (pipeline_state.json) in this run."));
  }
  await refresh();
  setPoll(refresh);
}

route();
