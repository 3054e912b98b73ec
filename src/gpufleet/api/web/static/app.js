// The gpufleet dashboard: one page, routed by the URL's fragment (#/map, #/queue,
// #/accounts, #/jobs/ID, #/nodes/NAME). Every datum comes from the controller's API with
// the token the user pasted, kept in sessionStorage and sent as a bearer header (never in
// a URL). Text from the API goes into the page as text nodes, never as markup.
"use strict";

const TOKEN_KEY = "gpufleet.token";
const STATES = ["free", "allocated", "shared", "mig", "draining", "unhealthy", "offline"];
const REFRESH_MS = 15000;
const GPU_POLL_MS = 5000;
const GPU_HISTORY = 60;
const SVG = "http://www.w3.org/2000/svg";
const main = document.getElementById("main");
const tip = document.getElementById("tip");
let refresh = null;

class Unauthorized extends Error {}

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) throw new Unauthorized();
  // Relative to /ui/, so a controller behind a path prefix works too.
  const response = await fetch(new URL(".." + path, location.href), {
    headers: { Authorization: "Bearer " + token },
    cache: "no-store",
  });
  if (response.status === 401) throw new Unauthorized();
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(response.status + ": " + detail);
  }
  return response.json();
}

// el("td", {class: "num"}, "text", child...): an element with attributes and children.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== undefined && c !== null));
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

// A table; a header ending in # heads a column of numbers. No headers: a key-value table.
function table(headers, rows) {
  if (!headers) return el("table", {}, el("tbody", {}, ...rows));
  const head = el("tr", {}, ...headers.map((h) => el("th", { class: h.endsWith("#") ? "num" : null }, h.replace(/#$/, ""))));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

function row(...cells) {
  return el("tr", {}, ...cells.map((c) => (c instanceof Node && c.nodeName === "TD" ? c : el("td", {}, c ?? ""))));
}

const num = (value) => el("td", { class: "num" }, value ?? "");
// A GPU reading rounded with its unit; empty where the source could not read it.
const reading = (value, unit) => (value === null || value === undefined ? "" : value.toFixed(0) + unit);
const link = (href, text) => el("a", { href }, text);
const jobLink = (id) => link("#/jobs/" + encodeURIComponent(id), id);
const nodeLink = (name) => link("#/nodes/" + encodeURIComponent(name), name);

function when(t) {
  return t ? new Date(t * 1000).toLocaleString() : "";
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

function gpusOf(job) {
  if (job.mig_profile) return job.nodes + " x " + job.mig_profile;
  if (job.gpu_milli) return job.nodes + " x " + job.gpu_milli / 1000 + " GPU";
  return job.nodes * job.gpus_per_node + " GPU";
}

// -- the cluster map --------------------------------------------------------------------

// The map's nodes carry their GPUs in columns: gpus[g] is GPU g's state, jobs[g] its holders.
function cellText(node, g, jobs) {
  const lines = [node.name + " GPU " + g + " (" + node.model + "): " + node.gpus[g]];
  if (node.mig_total[g]) lines.push("MIG instances held: " + node.mig_used[g] + " of " + node.mig_total[g]);
  else if (node.used_milli[g]) lines.push("held: " + node.used_milli[g] / 1000 + " GPU");
  if (node.util_pct[g] !== null) lines.push("utilisation: " + node.util_pct[g].toFixed(0) + "%");
  if (node.health[g]) lines.push("health: " + node.health[g]);
  if (node.reason) lines.push("node: " + node.state + ", " + node.reason);
  for (const id of node.jobs[g]) {
    const job = jobs[id];
    lines.push(job ? "job " + id + " " + job.name + ": " + job.user + " (" + job.account + ")" : "job " + id);
  }
  if (node.others[g]) lines.push(node.others[g] + (node.others[g] === 1 ? " job" : " jobs") + " of other users");
  return lines.join("\n");
}

async function mapPage() {
  const map = await api("/v1/dashboard/map");
  const summary = el("div", { class: "summary" },
    el("strong", {}, map.nodes.length + " nodes"),
    el("span", {}, map.running + " running, " + map.pending + " pending jobs"),
    ...STATES.map((s) => el("span", { class: "legend", "data-state": s },
      el("span", { class: "gpu s-" + s }), s + " " + (map.gpus[s] || 0))));
  const grid = el("div", { class: "nodes", id: "map" });
  const fragment = document.createDocumentFragment();
  map.nodes.forEach((node, n) => {
    const block = el("a", { class: "node", href: "#/nodes/" + encodeURIComponent(node.name), "data-node": n, "aria-label": node.name + " " + node.state });
    node.gpus.forEach((state, g) => block.append(el("span", { class: "gpu s-" + state, "data-gpu": g })));
    fragment.append(block);
  });
  grid.append(fragment);
  // One listener for every cell: thousands of cells, one handler.
  grid.addEventListener("mousemove", (event) => {
    const cell = event.target.closest(".gpu");
    if (!cell) { tip.hidden = true; return; }
    tip.textContent = cellText(map.nodes[cell.parentElement.dataset.node], Number(cell.dataset.gpu), map.jobs);
    tip.style.left = Math.min(event.clientX + 12, window.innerWidth - 300) + "px";
    tip.style.top = event.clientY + 12 + "px";
    tip.hidden = false;
  });
  grid.addEventListener("mouseleave", () => { tip.hidden = true; });
  main.replaceChildren(el("h1", {}, "Cluster"), summary, grid,
    el("p", { class: "muted" }, "As of " + when(map.time) + ". Hover a GPU for its jobs; click a node for its page."));
  refresh = setTimeout(route, REFRESH_MS);
}

// -- the queue --------------------------------------------------------------------------

async function queuePage(params) {
  const state = params.get("state") === "RUNNING" ? "RUNNING" : "PENDING";
  const query = new URLSearchParams({ state, limit: "100" });
  if (params.get("cursor")) query.set("cursor", params.get("cursor"));
  const page = await api("/v1/jobs?" + query);
  const now = Date.now() / 1000;
  const rows = page.jobs.map((job) => row(
    el("td", {}, jobLink(job.job_id)), job.name, job.user, job.account, job.partition, job.qos,
    gpusOf(job),
    state === "PENDING" ? job.reason : job.node_list.join(", "),
    state === "PENDING" ? (job.expected_start ? when(job.expected_start) : "not planned") : when(job.start_time),
    num(duration(now - (state === "PENDING" ? job.submit_time : job.start_time)))));
  const other = state === "PENDING" ? "RUNNING" : "PENDING";
  const pager = el("div", { class: "pager" },
    link("#/queue?state=" + other, "show " + other.toLowerCase()),
    page.next_cursor ? link("#/queue?" + new URLSearchParams({ state, cursor: page.next_cursor }), "older jobs") : null);
  const headers = state === "PENDING"
    ? ["Job", "Name", "User", "Account", "Partition", "QoS", "GPUs", "Reason", "Estimated start", "Waiting#"]
    : ["Job", "Name", "User", "Account", "Partition", "QoS", "GPUs", "Nodes", "Started", "Running#"];
  main.replaceChildren(el("h1", {}, state === "PENDING" ? "Queue: pending jobs" : "Running jobs"),
    el("p", { class: "muted" }, "Newest first. The estimated start is backfill's plan; other jobs have none yet."),
    pager, table(headers, rows));
}

// -- accounts ---------------------------------------------------------------------------

// Horizontal bars: one group per label, one bar per series, values in [0, max].
function barChart(labels, series, max, format) {
  const barH = 10, gap = 6, left = 130, width = 360;
  const groupH = series.length * barH + gap;
  const chart = svg("svg", { class: "chart", width: left + width + 60, height: labels.length * groupH + 24, role: "img" });
  labels.forEach((label, i) => {
    const y = i * groupH;
    chart.append(svg("text", { x: 0, y: y + barH }, label));
    series.forEach((s, k) => {
      const value = s.values[i] || 0;
      const w = max > 0 ? (value / max) * width : 0;
      chart.append(svg("rect", { class: s.class, x: left, y: y + k * barH, width: Math.max(w, 0.5), height: barH - 1 }));
      chart.append(svg("text", { x: left + w + 4, y: y + k * barH + barH - 1 }, format(value)));
    });
  });
  const keyY = labels.length * groupH + 14;
  series.forEach((s, k) => {
    chart.append(svg("rect", { class: s.class, x: left + k * 120, y: keyY - 9, width: 10, height: 10 }));
    chart.append(svg("text", { x: left + k * 120 + 14, y: keyY }, s.name));
  });
  return chart;
}

// A line over days: GPU-hours per day for the last ``days`` days.
function lineChart(points) {
  const w = 480, h = 140, pad = 30;
  const max = Math.max(1e-9, ...points.map((p) => p.value));
  const x = (i) => pad + (i * (w - 2 * pad)) / Math.max(1, points.length - 1);
  const y = (v) => h - pad - (v / max) * (h - 2 * pad);
  const chart = svg("svg", { class: "chart", width: w, height: h, role: "img" });
  chart.append(svg("line", { class: "axis", x1: pad, y1: h - pad, x2: w - pad, y2: h - pad }));
  chart.append(svg("polyline", { class: "line", points: points.map((p, i) => x(i) + "," + y(p.value)).join(" ") }));
  points.forEach((p, i) => {
    chart.append(svg("text", { x: x(i) - 12, y: h - pad + 14 }, p.label));
    chart.append(svg("text", { x: x(i) - 8, y: y(p.value) - 6 }, p.value.toFixed(1)));
  });
  return chart;
}

async function accountsPage() {
  const now = Math.floor(Date.now() / 1000);
  const day = 86400;
  const days = [6, 5, 4, 3, 2, 1, 0].map((k) => now - (k + 1) * day);
  const [fairshare, week, ...daily] = await Promise.all([
    api("/v1/fairshare"),
    api("/v1/usage?by=account&start=" + (now - 7 * day) + "&end=" + now),
    ...days.map((start) => api("/v1/usage?by=account&start=" + start + "&end=" + (start + day))),
  ]);
  const accounts = fairshare.filter((r) => r.user === null);
  const users = fairshare.filter((r) => r.user !== null);
  const parts = [el("h1", {}, "Accounts")];
  if (accounts.length) {
    parts.push(el("h2", {}, "Share and usage"),
      el("p", { class: "muted" }, "Each account's normalised share of the cluster against its normalised, decayed usage."),
      barChart(accounts.map((r) => r.account), [
        { name: "share", class: "share", values: accounts.map((r) => r.normalized_shares) },
        { name: "usage", class: "usage", values: accounts.map((r) => r.normalized_usage) },
      ], Math.max(...accounts.map((r) => Math.max(r.normalized_shares, r.normalized_usage))), (v) => (100 * v).toFixed(1) + "%"));
  } else {
    parts.push(el("p", { class: "muted" }, "No account tree is configured."));
  }
  if (users.length) {
    parts.push(el("h2", {}, "Fairshare factor"),
      barChart(users.map((r) => r.user + " (" + r.account + ")"), [
        { name: "factor", class: "factor", values: users.map((r) => r.factor ?? 0) },
      ], 1, (v) => v.toFixed(3)));
  }
  parts.push(el("h2", {}, "GPU-hours per day, last 7 days"),
    lineChart(daily.map((rows, i) => ({
      label: new Date(days[i] * 1000 + day * 1000).toLocaleDateString(undefined, { month: "numeric", day: "numeric" }),
      value: rows.reduce((sum, r) => sum + r.gpu_hours, 0),
    }))));
  parts.push(el("h2", {}, "GPU-hours by account, last 7 days"),
    table(["Account", "GPU-hours#", "Jobs#", "Runs#"], week.map((r) => row(r.key, num(r.gpu_hours.toFixed(2)), num(r.jobs), num(r.runs)))));
  if (fairshare.length) {
    parts.push(el("h2", {}, "Associations"),
      table(["Account", "User", "Shares#", "Norm. shares#", "Usage (GPU-s)#", "Effective usage#", "Factor#"],
        fairshare.map((r) => row(r.account, r.user ?? "", num(r.shares), num(r.normalized_shares.toFixed(4)),
          num(r.usage.toFixed(0)), num(r.effective_usage.toFixed(4)), num(r.factor === null ? "" : r.factor.toFixed(4))))));
  }
  main.replaceChildren(...parts);
}

// -- a job ------------------------------------------------------------------------------

async function output(id, stream) {
  try {
    const chunk = await api("/v1/jobs/" + encodeURIComponent(id) + "/output?stream=" + stream + "&limit=65536");
    return el("pre", {}, chunk.data || "(empty)");
  } catch (error) {
    if (error instanceof Unauthorized) throw error;
    return el("p", { class: "muted" }, stream + ": " + error.message);
  }
}

async function jobPage(id) {
  const job = await api("/v1/jobs/" + encodeURIComponent(id));
  const facts = [
    ["State", job.state + (job.reason ? " (" + job.reason + ")" : "")],
    ["Name", job.name], ["User", job.user], ["Account", job.account],
    ["Partition", job.partition], ["QoS", job.qos], ["GPUs", gpusOf(job)],
    ["Submitted", when(job.submit_time)], ["Started", when(job.start_time)], ["Ended", when(job.end_time)],
    ["Estimated start", when(job.expected_start)], ["Time limit", duration(job.time_limit_s)],
    ["Exit code", job.exit_code ?? ""], ["Restarts", job.restart_count],
  ];
  const nodes = el("td", {});
  job.node_list.forEach((n, i) => { if (i) nodes.append(", "); nodes.append(nodeLink(n)); });
  const history = table(["Time", "State", "Reason"], job.history.map((h) => row(when(h.time), h.state, h.reason)));
  const gpus = el("div", { id: "job-gpus" });
  main.replaceChildren(el("h1", {}, "Job " + job.job_id),
    table(null, [...facts.map(([k, v]) => row(k, String(v))), row("Nodes", nodes)]),
    el("h2", {}, "GPU utilisation"), gpus,
    el("h2", {}, "History"), history,
    el("h2", {}, "Output"), await output(id, "stdout"),
    el("h2", {}, "Errors"), await output(id, "stderr"));
  await jobGpus(job, gpus);
}

// A small line of the last readings, 0 to 100%.
function sparkline(values) {
  const w = 120, h = 24;
  const x = (i) => (values.length > 1 ? (i * w) / (values.length - 1) : w / 2);
  const y = (v) => h - 1 - (v / 100) * (h - 2);
  return svg("svg", { class: "chart", width: w, height: h, role: "img" },
    svg("polyline", { class: "line", points: values.map((v, i) => x(i) + "," + y(v)).join(" ") }));
}

// The job's GPUs with their latest readings; while it runs, read again every few seconds
// and draw each GPU's utilisation since the page opened.
async function jobGpus(job, where, seen = new Map()) {
  const hash = location.hash;
  const pages = await Promise.all(job.node_list.map((n) => api("/v1/dashboard/nodes/" + encodeURIComponent(n))));
  const rows = [];
  for (const page of pages) {
    const readings = new Map(page.readings.map((r) => [r.reading.index, r]));
    for (const gpu of page.node.gpus.filter((g) => g.jobs.includes(job.job_id))) {
      const r = readings.get(gpu.index);
      const key = page.node.name + "/" + gpu.index;
      const history = seen.get(key) || [];
      if (r && r.reading.util_pct !== null) history.push(r.reading.util_pct);
      seen.set(key, history.slice(-GPU_HISTORY));
      rows.push(row(page.node.name, num(gpu.index), gpu.model,
        num(r ? (r.reading.util_pct === null ? "not read" : r.reading.util_pct.toFixed(0) + "%") : "no reading"),
        el("td", {}, history.length ? sparkline(seen.get(key)) : ""),
        num(r ? r.reading.mem_used_mib + " MiB" : ""), num(r ? reading(r.reading.temp_c, " C") : ""),
        r ? when(r.at) : ""));
    }
  }
  where.replaceChildren(rows.length
    ? table(["Node", "GPU#", "Model", "Utilisation#", "Since opened", "Memory used#", "Temperature#", "Read at"], rows)
    : el("p", { class: "muted" }, "The job holds no GPU now."));
  if (rows.length && location.hash === hash) {
    refresh = setTimeout(() => jobGpus(job, where, seen).catch(() => { /* the next page shows errors */ }), GPU_POLL_MS);
  }
}

// -- a node -----------------------------------------------------------------------------

async function nodePage(name) {
  const page = await api("/v1/dashboard/nodes/" + encodeURIComponent(name));
  const node = page.node;
  const readings = new Map(page.readings.map((r) => [r.reading.index, r.reading]));
  const gpuRows = node.gpus.map((g) => {
    const r = readings.get(g.index);
    const jobs = el("td", {});
    g.jobs.forEach((id, i) => { if (i) jobs.append(", "); jobs.append(jobLink(id)); });
    if (g.other_jobs) jobs.append((g.jobs.length ? ", " : "") + g.other_jobs + " of other users");
    return row(num(g.index), g.model, g.mig.join(", "), num(g.used_milli / 1000), jobs,
      num(r ? reading(r.util_pct, "%") : ""), num(r ? reading(r.temp_c, " C") : ""),
      num(r ? reading(r.power_w, " W") : ""), num(r ? r.xid_last || "" : ""),
      num(r ? r.ecc_dbe_volatile : ""), r ? (r.healthy ? "healthy" : el("span", { class: "error" }, "unhealthy: " + r.health_reason)) : "no reading");
  });
  main.replaceChildren(el("h1", {}, "Node " + node.name),
    el("p", {}, node.state + (node.reason ? ": " + node.reason : ""), " · pool " + node.pool,
      " · CPUs " + node.cpu_milli_used / 1000 + " of " + node.cpu_milli / 1000,
      " · memory " + node.memory_mib_used + " of " + node.memory_mib + " MiB",
      " · last heartbeat " + (when(node.last_heartbeat) || "never")),
    el("h2", {}, "GPUs"),
    table(["#", "Model", "MIG", "Held (GPU)#", "Jobs", "Util.#", "Temp.#", "Power#", "Last XID#", "ECC DBE#", "Health"], gpuRows),
    el("h2", {}, "Events"),
    page.events.length
      ? table(["Time", "Who", "Action", "Detail"], page.events.map((e) => row(when(e.time), e.who, e.action, JSON.stringify(e.detail))))
      : el("p", { class: "muted" }, "No events."));
}

// -- routing and sign-in ----------------------------------------------------------------

function signIn(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById("signin-error").textContent = message || "";
  document.getElementById("signin").hidden = false;
  document.getElementById("signout").hidden = true;
  main.replaceChildren();
  document.body.dataset.ready = "signin";
}

async function route() {
  clearTimeout(refresh);
  tip.hidden = true;
  const [path, query] = (location.hash.slice(1) || "/map").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const page = parts[0] || "map";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("on", a.dataset.page === page);
  if (!sessionStorage.getItem(TOKEN_KEY)) return signIn();
  document.getElementById("signin").hidden = true;
  document.getElementById("signout").hidden = false;
  delete document.body.dataset.ready;
  try {
    if (page === "queue") await queuePage(params);
    else if (page === "accounts") await accountsPage();
    else if (page === "jobs" && parts[1]) await jobPage(parts[1]);
    else if (page === "nodes" && parts[1]) await nodePage(parts[1]);
    else await mapPage();
    document.body.dataset.ready = page;
  } catch (error) {
    if (error instanceof Unauthorized) return signIn("The token was refused: it is unknown or revoked.");
    main.replaceChildren(el("p", { class: "error" }, error.message));
    document.body.dataset.ready = "error";
  }
}

document.getElementById("signin").addEventListener("submit", (event) => {
  event.preventDefault();
  const field = event.target.elements.token;
  sessionStorage.setItem(TOKEN_KEY, field.value.trim());
  field.value = "";
  route();
});
document.getElementById("signout").addEventListener("click", () => signIn());
document.getElementById("find").addEventListener("submit", (event) => {
  event.preventDefault();
  const id = event.target.elements.job.value.trim();
  if (id) location.hash = "#/jobs/" + encodeURIComponent(id);
});
window.addEventListener("hashchange", route);
route();
