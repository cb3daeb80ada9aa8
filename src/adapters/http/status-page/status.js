// @ts-check
// The fencegate status page: read-only. Loads /api/status, then follows /api/events
// (server-sent events) for decisions and changes. Every text from the gateway goes into the
// page as text (textContent), never as markup: holder ids come from controllers.
//
// What the gateway sends is typed in ../status-api.ts; tsc checks this file against it
// (tsconfig.json here). The imports below are JSDoc, for the checker only: the browser runs
// this file as served, and it loads nothing else.
"use strict";

/** @typedef {import("../status-api.ts").ActuatorCard} ActuatorCard */
/** @typedef {import("../status-api.ts").ApiError} ApiError */
/** @typedef {import("../status-api.ts").AuditAnswer} AuditAnswer */
/** @typedef {import("../status-api.ts").Decision} Decision */
/** @typedef {import("../status-api.ts").GatewayLine} GatewayLine */
/** @typedef {import("../status-api.ts").StatusBody} StatusBody */
/** @typedef {import("../status-api.ts").StatusEvents} StatusEvents */
/** @typedef {import("../../../../packages/protocol/src/index.ts").EventType} EventType */
/** @typedef {import("../../../../packages/protocol/src/index.ts").PointValues} PointValues */

/**
 * A counter's filter of the cards.
 * @typedef {{ label: string, what: string, cls: string, test: (a: ActuatorCard) => boolean }} Filter
 */
/**
 * A card's elements that change.
 * @typedef {Record<"link" | "where" | "problem" | "points" | "pointsAge" | FieldName, HTMLElement>} Fields
 * @typedef {"answer" | "holder" | "token" | "expires" | "fence" | "accepted" | "refusal" | "safe"} FieldName
 */
/**
 * A drawn card. `data.lastAnswerAgeMs` is refreshed by every gateway line between cards;
 * `refusal` is the last refusal's text without its age.
 * @typedef {{ root: HTMLElement, f: Fields, data: { -readonly [K in keyof ActuatorCard]: ActuatorCard[K] },
 *   receivedAt: number, answerAt: number, refusal: string }} Card
 */

const FEED_MAX = 200; // decisions shown
const PAUSED_MAX = 1000; // decisions held while paused
const AUDIT_PAGE = 25;

/** An element of index.html: every id asked for is there. */
const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
/** @type {Map<string, Card>} by actuator id */
const cards = new Map();
/** @type {GatewayLine | null} */
let gateway = null;
let gatewayAt = 0;
/** @type {Filter | null} */
let filter = null;
let paused = false;
/** @type {Decision[]} */
let held = [];
let lastDecision = 0;
/** @type {{ actuator: string | null, holder: string, outcome: string, cursors: number[], next: number | null }} */
const audit = { actuator: null, holder: "", outcome: "", cursors: [], next: null };

/**
 * An element with attributes (`on...`: a listener) and children (strings as text).
 * @param {string} tag
 * @param {Record<string, string | EventListener> | null} attrs
 * @param {...(Node | string)} children
 */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = /** @type {string} */ (v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), /** @type {EventListener} */ (v));
    else node.setAttribute(k, /** @type {string} */ (v));
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

/** @param {number | null | undefined} ms */
function duration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  const s = Math.max(0, ms) / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 120) return `${Math.round(s)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

/**
 * An age sent at `receivedAt` (performance.now()), as it is now; null stays null.
 * @param {number} receivedAt
 * @param {number | null} ageMs
 */
function since(receivedAt, ageMs) {
  return ageMs === null || ageMs === undefined ? null : ageMs + (performance.now() - receivedAt);
}

/**
 * @param {Node} node
 * @param {string} text
 */
function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

/** @param {PointValues | null} set */
function fmtSet(set) {
  return set
    ? Object.entries(set)
        .map(([k, v]) => `${k}=${v}`)
        .join(" ")
    : "";
}

// ---------------------------------------------------------------------------------------
// Gateway line and counters

/** @param {GatewayLine} g */
function drawUptime(g) {
  setText($("gw-uptime"), duration(g.uptimeMs + performance.now() - gatewayAt));
}

/** @param {GatewayLine} g */
function drawGateway(g) {
  gateway = g;
  gatewayAt = performance.now();
  setText($("gw-id"), g.id);
  setText($("gw-version"), g.version);
  drawUptime(g);
  $("gw-broker").className = g.broker.connected ? "good" : "bad";
  setText($("gw-broker"), g.broker.connected ? "connected" : "not connected");
  const j = g.journal;
  $("gw-journal").className = j.problem ? "bad" : j.auditLag.oldestMs > 1000 ? "warn" : "good";
  setText(
    $("gw-journal"),
    j.problem
      ? j.problem
      : `last commit ${duration(j.lastCommitAgeMs)} ago · audit lag ${j.auditLag.records} (${duration(j.auditLag.oldestMs)}) · ${j.auditLag.commits} commits`,
  );
  $("gw-health").className = g.health.problem ? "bad" : "good";
  setText($("gw-health"), g.health.problem ? `503: ${g.health.problem}` : "200 ok");
  const buses = $("gw-buses");
  buses.replaceChildren(...g.buses.map((b) => el("span", { class: `chip ${b.up ? "good" : "bad"}` }, `${b.name} ${b.up ? "up" : "down"}`)));
  for (const [id, age] of Object.entries(g.lastAnswerAgeMs)) {
    const card = cards.get(id);
    if (card) {
      card.data.lastAnswerAgeMs = age;
      card.answerAt = gatewayAt;
    }
  }
  // A group member that does not serve says so on every card (the gateway line comes every few seconds; cards only on change).
  const note = g.group ? g.group.note : null;
  if (note) {
    for (const card of cards.values()) {
      card.f.problem.hidden = false;
      setText(card.f.problem, note);
    }
  }
  drawCounters(g.counters);
}

/** @param {GatewayLine["counters"]} c */
function drawCounters(c) {
  /** @type {Filter[]} */
  const items = [
    { label: `${c.online} online`, what: "actuators online", cls: "good", test: (a) => a.online },
    { label: `${c.offline} offline`, what: "actuators offline", cls: c.offline > 0 ? "bad" : "", test: (a) => !a.online },
    {
      label: `${c.leases} ${c.leases === 1 ? "lease" : "leases"} held`,
      what: "actuators under a lease",
      cls: "",
      test: (a) => a.lease !== null,
    },
  ];
  const codes = Object.entries(c.refusalsLastMinute);
  if (codes.length === 0)
    items.push({
      label: "0 refused (1 min)",
      what: "actuators with a refusal in the last minute",
      cls: "",
      test: (a) => Object.keys(a.refusalsLastMinute).length > 0,
    });
  for (const [code, n] of codes)
    items.push({
      label: `${n} ${code} (1 min)`,
      what: `actuators that refused with ${code} in the last minute`,
      cls: "warn",
      test: (a) => (a.refusalsLastMinute[code] || 0) > 0,
    });
  items.push({
    label: `${c.outcomeUnknownLastMinute} outcome unknown (1 min)`,
    what: "actuators with an unknown outcome in the last minute",
    cls: c.outcomeUnknownLastMinute > 0 ? "bad" : "",
    test: (a) => a.outcomeUnknownLastMinute > 0,
  });
  $("counters").replaceChildren(
    ...items.map((item) =>
      el(
        "button",
        {
          type: "button",
          class: `counter ${item.cls}${filter && filter.what === item.what ? " active" : ""}`,
          "aria-pressed": String(!!filter && filter.what === item.what),
          onclick: () => setFilter(filter && filter.what === item.what ? null : item),
        },
        item.label,
      ),
    ),
  );
}

/** @param {Filter | null} f */
function setFilter(f) {
  filter = f;
  $("filter-note").hidden = !f;
  if (f) setText($("filter-what"), f.what);
  if (gateway) drawCounters(gateway.counters);
  for (const card of cards.values()) card.root.hidden = !!filter && !filter.test(card.data);
}

// ---------------------------------------------------------------------------------------
// Actuator cards

/**
 * @param {ActuatorCard} a
 * @returns {Card}
 */
function makeCard(a) {
  /** @type {Partial<Fields>} */
  const f = {};
  const field = (/** @type {FieldName} */ name, /** @type {string} */ label) => {
    const dd = (f[name] = el("dd", { class: name }));
    return el("div", {}, el("dt", {}, label), dd);
  };
  f.link = el("span", { class: "link" });
  f.where = el("p", { class: "where" });
  f.problem = el("p", { class: "problem bad" });
  const root = el(
    "article",
    { class: "card", "data-actuator": a.id },
    el("h3", {}, el("span", { class: "id" }, a.id), " ", f.link),
    f.where,
    f.problem,
    el(
      "dl",
      {},
      field("answer", "last answer"),
      field("holder", "lease holder"),
      field("token", "token"),
      field("expires", "expires in"),
      field("fence", "fence"),
      field("accepted", "last accepted"),
      field("refusal", "last refusal"),
      field("safe", "safe write"),
    ),
    (f.points = el("table", { class: "points" }, (f.pointsAge = el("caption", {})))),
    el("button", { type: "button", class: "open-audit", onclick: () => openAudit(a.id) }, "Audit trail"),
  );
  // Every field is set above; drawCard sets `refusal` before the card is first ticked.
  return { root, f: /** @type {Fields} */ (f), data: a, receivedAt: performance.now(), answerAt: performance.now(), refusal: "" };
}

/** @param {ActuatorCard} a */
function drawCard(a) {
  let card = cards.get(a.id);
  if (!card) {
    card = makeCard(a);
    cards.set(a.id, card);
    $("actuators").append(card.root);
  }
  card.data = a;
  card.receivedAt = performance.now();
  card.answerAt = card.receivedAt;
  const f = card.f;
  setText(f.where, `${a.bus} unit ${a.unit} · ${a.profile} · on expiry: ${a.expiry}${a.gateway ? ` · served by ${a.gateway}` : ""}`);
  f.problem.hidden = !a.problem;
  setText(f.problem, a.problem || "");
  f.link.className = `link ${a.online ? "good" : "bad"}`;
  setText(f.link, a.online ? "online" : "offline");
  setText(f.holder, a.lease ? a.lease.holder : "free");
  setText(f.token, a.lease ? String(a.lease.token) : "–");
  setText(f.fence, `token ${a.fence.token} · seq ${a.fence.seq === null ? "–" : a.fence.seq}`);
  const acc = a.lastAccepted;
  setText(f.accepted, acc ? `${acc.holder} t${acc.token}/s${acc.seq} ${fmtSet(acc.set)} → ${acc.outcome || "at the device"}` : "none yet");
  const ref = a.lastRefusal;
  f.refusal.className = `refusal${ref ? " warn" : ""}`;
  card.refusal = ref
    ? `${ref.code} · ${ref.holder || "?"}${ref.token !== null ? ` t${ref.token}` : ""}${ref.seq !== null ? `/s${ref.seq}` : ""}`
    : "none yet";
  const sw = a.safeWrite;
  f.safe.className = `safe${sw ? (sw.lastCode ? " bad" : " warn") : ""}`;
  setText(
    f.safe,
    sw
      ? `pending: ${fmtSet(sw.set)} (token ${sw.token}, ${sw.attempts} ${sw.attempts === 1 ? "attempt" : "attempts"}${sw.lastCode ? `, last ${sw.lastCode}` : ""})`
      : "none owed",
  );
  f.points.replaceChildren(
    f.pointsAge,
    ...a.points.map((p) =>
      el(
        "tr",
        p.fault ? { class: "fault" } : {},
        el("th", {}, p.name),
        el("td", {}, p.fault ? `fault: ${p.fault}` : p.value === null ? "–" : String(p.value)),
        el("td", { class: "unit" }, p.unit),
      ),
    ),
  );
  card.root.hidden = !!filter && !filter.test(a);
  tickCard(card);
}

/** @param {Card} card */
function tickCard(card) {
  const a = card.data;
  const answer = since(card.answerAt, a.lastAnswerAgeMs);
  setText(card.f.answer, answer === null ? "never" : `${duration(answer)} ago${a.rttMs !== null ? ` (${a.rttMs} ms)` : ""}`);
  const read = since(card.receivedAt, a.pointsAgeMs);
  setText(card.f.pointsAge, read === null ? "points: not read yet" : `points read ${duration(read)} ago`);
  const left = a.lease ? a.lease.expiresInMs - (performance.now() - card.receivedAt) : null;
  setText(card.f.expires, left === null ? "–" : duration(Math.max(0, left)));
  const acc = a.lastAccepted;
  if (acc) card.f.accepted.title = `${duration(since(card.receivedAt, acc.ageMs))} ago`;
  const ref = a.lastRefusal;
  setText(card.f.refusal, ref ? `${card.refusal} · ${duration(since(card.receivedAt, ref.ageMs))} ago` : card.refusal);
}

function tick() {
  if (gateway) drawUptime(gateway);
  for (const card of cards.values()) tickCard(card);
}

// ---------------------------------------------------------------------------------------
// The live feed

/** @type {Partial<Record<EventType, string>>} */
const TYPE_LABEL = { rejected: "refused", "outcome-unknown": "outcome unknown" };

/** @param {Decision} d */
function feedItem(d) {
  const who = d.safeWrite ? "safe write (@gateway)" : d.holder || "";
  const ts = d.token !== undefined ? ` t${d.token}${d.seq !== undefined ? `/s${d.seq}` : ""}` : "";
  return el(
    "li",
    { "data-type": d.type, "data-code": d.code || "", "data-actuator": d.actuator, class: d.safeWrite ? "safewrite" : "" },
    el("time", {}, d.at.slice(11, 23)),
    " ",
    el("span", { class: "actuator" }, d.actuator),
    " ",
    el("span", { class: "type" }, TYPE_LABEL[d.type] || d.type),
    d.code ? el("span", { class: "code" }, ` ${d.code}`) : "",
    ` ${who}${ts}`,
  );
}

/** @param {readonly Decision[]} list */
function addDecisions(list) {
  const fresh = list.filter((d) => d.n > lastDecision);
  if (fresh.length === 0) return;
  lastDecision = /** @type {Decision} */ (fresh[fresh.length - 1]).n;
  if (paused) {
    held.push(...fresh);
    if (held.length > PAUSED_MAX) held = held.slice(held.length - PAUSED_MAX);
    setText($("feed-note"), `${held.length} new while paused`);
    return;
  }
  const feed = $("feed");
  feed.prepend(...fresh.reverse().map(feedItem));
  while (feed.childElementCount > FEED_MAX) /** @type {Element} */ (feed.lastElementChild).remove();
}

function togglePause() {
  paused = !paused;
  const button = $("pause");
  button.setAttribute("aria-pressed", String(paused));
  setText(button, paused ? "Resume" : "Pause");
  if (!paused) {
    const waiting = held;
    held = [];
    lastDecision = waiting.length > 0 ? /** @type {Decision} */ (waiting[0]).n - 1 : lastDecision;
    setText($("feed-note"), "");
    addDecisions(waiting);
  }
}

// ---------------------------------------------------------------------------------------
// The audit trail

/** @param {string} id */
function openAudit(id) {
  audit.actuator = id;
  audit.holder = "";
  audit.outcome = "";
  audit.cursors = [];
  const form = /** @type {HTMLFormElement} */ ($("audit-filter"));
  form.holder.value = "";
  form.outcome.value = "";
  if (location.hash !== `#audit=${id}`) history.replaceState(null, "", `#audit=${id}`);
  $("audit").hidden = false;
  setText($("audit-actuator"), id);
  loadAudit(null);
  $("audit").scrollIntoView({ block: "start" });
}

/**
 * One page of the open actuator's audit trail: the newest, or the one older than entry `before`.
 * @param {number | null} before
 */
async function loadAudit(before) {
  const q = new URLSearchParams({ limit: String(AUDIT_PAGE) });
  if (audit.holder) q.set("holder", audit.holder);
  if (audit.outcome) q.set("outcome", audit.outcome);
  if (before !== null) q.set("before", String(before));
  const note = $("audit-note");
  setText(note, "loading…");
  /** @type {AuditAnswer & Partial<ApiError>} an audit page, or (not ok) a refusal */
  let body;
  try {
    // An actuator is open: its panel, whose buttons call this, shows only then.
    const actuator = /** @type {string} */ (audit.actuator);
    const res = await fetch(`/api/actuators/${encodeURIComponent(actuator)}/audit?${q}`, { cache: "no-store" });
    body = await res.json();
    if (!res.ok) throw new Error(body.error ? body.error.message : `HTTP ${res.status}`);
  } catch (err) {
    setText(note, `The audit trail could not be read: ${/** @type {Error} */ (err).message}`);
    return;
  }
  audit.next = body.nextBefore;
  $("audit-rows").replaceChildren(
    ...body.entries.map((e) => {
      const o = e.outcome;
      const outcome = o.kind === "applied" ? "applied" : o.kind === "pending" ? "pending" : o.code;
      return el(
        "tr",
        { "data-outcome": outcome },
        el("td", {}, e.atMs === null ? "–" : new Date(e.atMs).toISOString().replace("T", " ").slice(0, 23)),
        el("td", {}, e.holder),
        el("td", { class: "num" }, String(e.token)),
        el("td", { class: "num seq" }, String(e.seq)),
        el("td", {}, fmtSet(e.set)),
        el("td", { class: `outcome ${o.kind}` }, outcome),
      );
    }),
  );
  setText(
    note,
    body.entries.length === 0
      ? "No recorded command matches."
      : "Newest first. Times are when the journal recorded each command, within journal.auditLagMs of the gateway's decision (the live feed has the decisions' own times). Refusals change nothing and are not recorded here; the live feed shows them.",
  );
  setText($("audit-page"), `page ${audit.cursors.length + 1}`);
  /** @type {HTMLButtonElement} */ ($("audit-older")).disabled = audit.next === null;
  /** @type {HTMLButtonElement} */ ($("audit-newer")).disabled = audit.cursors.length === 0;
}

// ---------------------------------------------------------------------------------------
// Loading and following

/** @returns {Promise<StatusBody>} */
async function load() {
  const res = await fetch("/api/status", { cache: "no-store" });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  /** @type {StatusBody} */
  const s = await res.json();
  for (const a of s.actuators) drawCard(a);
  drawGateway(s.gateway);
  if (lastDecision === 0 || s.feed.length === 0 || /** @type {Decision} */ (s.feed[0]).n > lastDecision + 1) {
    // First load, or decisions were missed while disconnected: start the feed afresh.
    $("feed").replaceChildren();
    lastDecision = 0;
  }
  addDecisions(s.feed);
  return s;
}

/**
 * @param {string} text
 * @param {string} cls
 */
function live(text, cls) {
  $("gw-live").className = cls;
  setText($("gw-live"), text);
}

/**
 * Calls `handle` with each `event` of the stream, its data as the gateway sends it under that name.
 * @template {keyof StatusEvents} E
 * @param {EventSource} stream
 * @param {E} event
 * @param {(data: StatusEvents[E]) => void} handle
 */
function on(stream, event, handle) {
  stream.addEventListener(event, (e) => handle(JSON.parse(e.data)));
}

function follow() {
  const stream = new EventSource("/api/events");
  stream.addEventListener("hello", () => {
    live("live", "good");
    load().catch((err) => live(`could not load: ${err.message}`, "bad"));
  });
  on(stream, "decisions", (body) => {
    addDecisions(body.decisions);
    if (body.skipped > 0) setText($("feed-note"), `${body.skipped} decisions came too fast to show`);
  });
  on(stream, "actuator", drawCard);
  on(stream, "gateway", drawGateway);
  stream.onerror = () => {
    if (stream.readyState !== EventSource.CLOSED) return live("reconnecting…", "warn");
    // Refused (too many feeds open) or the gateway went away: say which, try again later.
    load()
      .then((s) =>
        live(
          s.streams.open >= s.streams.max
            ? `live feed refused: ${s.streams.open} of ${s.streams.max} open; retrying`
            : "live feed lost; retrying",
          "bad",
        ),
      )
      .catch(() => live("gateway unreachable; retrying", "bad"));
    setTimeout(follow, 5000);
  };
}

document.addEventListener("DOMContentLoaded", () => {
  $("pause").addEventListener("click", togglePause);
  $("filter-clear").addEventListener("click", () => setFilter(null));
  $("audit-close").addEventListener("click", () => {
    $("audit").hidden = true;
    audit.actuator = null;
    history.replaceState(null, "", location.pathname);
  });
  $("audit-filter").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = /** @type {HTMLFormElement} */ (e.target);
    audit.holder = form.holder.value.trim();
    audit.outcome = form.outcome.value;
    audit.cursors = [];
    loadAudit(null);
  });
  $("audit-older").addEventListener("click", () => {
    if (audit.next === null) return;
    audit.cursors.push(audit.next);
    loadAudit(audit.next);
  });
  $("audit-newer").addEventListener("click", () => {
    audit.cursors.pop();
    loadAudit(audit.cursors.length > 0 ? /** @type {number} */ (audit.cursors[audit.cursors.length - 1]) : null);
  });
  setInterval(tick, 250);
  // Counts over the last minute go down by themselves: refresh everything now and then.
  setInterval(() => load().catch(() => {}), 15000);
  load()
    .then(() => {
      const m = /^#audit=([a-z0-9_-]{1,64})$/.exec(location.hash);
      const id = m ? m[1] : undefined;
      if (id !== undefined && cards.has(id)) openAudit(id);
    })
    .catch((err) => live(`could not load: ${err.message}`, "bad"));
  follow();
});
