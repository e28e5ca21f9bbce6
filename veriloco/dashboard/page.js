// The dashboard page: polls /api/state and redraws. No library; text goes in with textContent only.
"use strict";

// The order of veriloco/phase_progress.py's PHASE_ORDER (its step numbers index this list).
const PHASES = ["join", "train", "reveal", "delay", "verify", "objection", "verdict_reveal", "dispute",
                "dispute_reveal", "propose"];
const SVG = "http://www.w3.org/2000/svg";
let lastRead = null;      // the last document, and when it arrived (for the countdown between polls)
let lastArrival = 0;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) tr.appendChild(cell instanceof Node ? cell : el("td", cell));
  return tr;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function loss(value) {
  return value === null || value === undefined ? "—" : value.toFixed(4);
}

function who(m) {
  return m.name || m.address.slice(0, 12) + "…";
}

function seconds(s) {
  if (s === null || s === undefined) return "";
  s = Math.max(0, Math.round(s));
  return s >= 60 ? `~${Math.floor(s / 60)} min ${s % 60} s` : `~${s} s`;
}

function drawNow(state) {
  const now = state.now;
  document.getElementById("epoch-now").textContent = `epoch ${now.epoch}`;
  document.getElementById("phase").textContent = now.closing ? `${now.phase} (closing: ${now.closing})` : now.phase;
  const list = document.getElementById("phases");
  // Shown only while they run: a dispute round, and the delayed seed's phase (a run with delay_squarings).
  const shown = p => (!p.startsWith("dispute") || now.phase.startsWith("dispute")) && (p !== "delay" || now.phase === p);
  list.replaceChildren(...PHASES.filter(shown).map(p => {
    const step = PHASES.indexOf(p) + 1;
    return el("li", p, step < now.step ? "done" : step === now.step ? "current" : "");
  }));
  const fraction = now.fraction === null ? 0 : now.fraction;
  document.getElementById("phase-bar").style.width = `${Math.round(fraction * 100)}%`;
  drawCountdown();
}

function drawCountdown() {
  if (!lastRead) return;
  const now = lastRead.now;
  const elapsed = (Date.now() - lastArrival) / 1000;
  const left = now.seconds_left === null ? null : now.seconds_left - elapsed;
  const when = left === null ? "" : `, ${seconds(left)}`;
  document.getElementById("countdown").textContent =
    `deadline at height ${now.deadline}: ${now.blocks_left} blocks left${when} (height ${now.height})`;
}

function drawFunds(state) {
  const f = state.funds;
  const balanced = el("td", f.balanced ? "yes ✓" : "NO ✗", f.balanced ? "ok" : "bad");
  fill(document.getElementById("funds-rows"), [
    row(["bonded", f.bonded.shown]), row(["unbonding", f.unbonding.shown]), row(["reward pool", f.reward_pool.shown]),
    row(["held (sum)", f.held.shown]), row(["contract's bank balance", f.contract_balance.shown]),
    row([el("td", "accounts = balance"), balanced]),
    row(["slashed over the run", f.slashed_over_run.shown]), row(["rewards over the run", f.rewards_over_run.shown]),
  ]);
}

function drawEpochs(state) {
  const tbody = document.querySelector("#epochs tbody");
  fill(tbody, state.epochs.slice().reverse().map(e => {
    const tr = row([e.epoch, e.phase, e.hosts, e.accepted, e.validators, loss(e.val_loss_next), loss(e.train_loss),
                    e.slashed.shown, e.rewards.shown, e.note || ""]);
    tr.dataset.epoch = e.epoch;
    tr.dataset.phase = e.phase;
    return tr;
  }));
}

function drawMembers(state) {
  document.getElementById("outcomes-epoch").textContent =
    state.outcomes_epoch === null ? "(none decided yet)" : `of epoch ${state.outcomes_epoch}`;
  fill(document.querySelector("#outcomes tbody"), state.outcomes.map(o => row([
    o.name, el("td", o.address, "addr"), o.role, el("td", o.outcome, o.outcome),
    o.weight ? `${o.stake.shown} (weighs ${o.weight.shown})` : o.stake.shown, o.slashed.shown,
    o.reward.shown])));
  fill(document.querySelector("#members tbody"), state.members.map(m => row([
    m.name, el("td", m.address, "addr"), m.role, m.bonded.shown, m.unbonding.shown, m.slashed_total.shown,
    m.rewarded_total.shown])));
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function drawLoss(state) {
  const chart = document.getElementById("loss");
  const series = {
    val: state.epochs.filter(e => e.val_loss_next !== null).map(e => [e.epoch + 1, e.val_loss_next]),
    train: state.epochs.filter(e => e.train_loss !== null).map(e => [e.epoch, e.train_loss]),
  };
  const points = series.val.concat(series.train);
  const nodes = [];
  if (points.length === 0) {
    nodes.push(svg("text", {x: 20, y: 110}, "no agreed model yet: the curve starts when epoch 0 closes"));
    chart.replaceChildren(...nodes);
    return;
  }
  const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (y1 - y0 < 1e-6) { y0 -= 0.05; y1 += 0.05; }
  const L = 50, R = 980, T = 12, B = 190;
  const px = x => L + (x - x0) / (x1 - x0) * (R - L);
  const py = y => B - (y - y0) / (y1 - y0) * (B - T);
  nodes.push(svg("line", {x1: L, y1: B, x2: R, y2: B, class: "axis"}), svg("line", {x1: L, y1: T, x2: L, y2: B, class: "axis"}));
  for (const y of [y0, (y0 + y1) / 2, y1]) nodes.push(svg("text", {x: 4, y: py(y) + 4}, y.toFixed(3)));
  for (const x of [...new Set(xs)].sort((a, b) => a - b)) nodes.push(svg("text", {x: px(x) - 4, y: B + 16}, String(x)));
  for (const [name, pts] of Object.entries(series)) {
    if (pts.length === 0) continue;
    nodes.push(svg("polyline", {class: name, points: pts.map(([x, y]) => `${px(x)},${py(y)}`).join(" ")}));
    for (const [x, y] of pts) nodes.push(svg("circle", {class: name, cx: px(x), cy: py(y), r: 3}));
  }
  chart.replaceChildren(...nodes);
}

function draw(state) {
  document.getElementById("run-name").textContent = state.run.name;
  document.getElementById("run-info").textContent =
    `run ${state.run.run_id.slice(0, 16)}… · contract ${state.run.contract} · ${state.run.chain} · ` +
    `${state.run.model} · H=${state.run.inner_steps}, S=${state.run.segments}, k=${state.run.challenges_k}, ` +
    `seats_cap=${state.run.seats_cap}, rule ${state.run.rule}`;
  drawNow(state);
  drawFunds(state);
  drawEpochs(state);
  drawMembers(state);
  drawLoss(state);
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const response = await fetch("/api/state", {cache: "no-store"});
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    lastRead = body;
    lastArrival = Date.now();
    draw(body);
    status.textContent = `live · read at ${new Date(body.updated * 1000).toLocaleTimeString()}`;
    status.dataset.reads = String(Number(status.dataset.reads || 0) + 1);
  } catch (error) {
    status.textContent = `cannot read the chain now: ${error.message} (retrying)`;
  }
}

const refresh = Number(document.body.dataset.refresh) || 2000;
poll();
setInterval(poll, refresh);
setInterval(drawCountdown, 1000);
