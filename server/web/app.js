// The web view (docs/web-view.md): polls this replica's JSON every second and redraws.
// Ids come from clients: they are only ever set as text (textContent, attributes), never
// parsed as markup, and the server's Content-Security-Policy allows no inline script.
"use strict";

const POLL_MS = 1000;
// History events asked for at first, and added by each "Show older" (the endpoint's most: 1000).
const EVENTS_PAGE = 50;
const EVENTS_MAX = 1000;
// Epoch observations kept per group for the timeline (about ten minutes at one a second).
const TIMELINE_POINTS = 600;
const SVG_NS = "http://www.w3.org/2000/svg";
// Past this many cells (members × partitions) the browser would struggle with a matrix:
// the page shows each member's counts instead. A variable, so that a test can lower it.
const limits = { matrixCells: 20000 };

const state = {
  selected: null, // the group id the hash names
  observed: new Map(), // group id -> [{t, groupEpoch, assignmentEpoch, members: {id: epoch}}]
  eventsLimit: EVENTS_PAGE, // history events asked for, for the selected group
  timer: null,
};

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "text") node.textContent = value;
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  return node;
}

// `url` is relative to the page, never to the server's root: the page may be served under a path
// prefix, as the API server's pod proxy serves it (kubectl proxy).
async function getJson(url) {
  const response = await fetch(url, { cache: "no-store", headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({}));
  return { ok: response.ok, status: response.status, body };
}

function selectedFromHash() {
  const match = location.hash.match(/^#\/groups\/(.+)$/);
  return match ? decodeURIComponent(match[1]) : null;
}

function groupHref(id) {
  return "#/groups/" + encodeURIComponent(id);
}

function setStatus(kind, text) {
  const status = document.getElementById("status");
  status.dataset.status = kind;
  status.textContent = text;
}

// -- the groups list -----------------------------------------------------------------

function renderGroups(listing) {
  document.getElementById("replica").textContent = listing.replicaId ? "replica " + listing.replicaId : "";
  const shown = listing.groups.length;
  document.getElementById("group-count").textContent =
    listing.total > shown ? `(${shown} of ${listing.total})` : `(${shown})`;
  document.getElementById("groups-empty").hidden = shown > 0;
  const rows = listing.groups.map((g) => {
    const row = el(
      "tr",
      { "data-group": g.groupId, "aria-selected": String(g.groupId === state.selected) },
      el("td", {}, el("a", { href: groupHref(g.groupId), text: g.groupId })),
      el("td", { text: g.groupType }),
      el("td", { text: g.groupState, "data-field": "state" }),
      el("td", { text: `${g.groupEpoch} / ${g.assignmentEpoch}` }),
      el("td", { text: String(g.members), "data-field": "members" }),
    );
    row.addEventListener("click", () => { location.hash = groupHref(g.groupId); });
    return row;
  });
  document.querySelector("#groups tbody").replaceChildren(...rows);
}

// -- one group ---------------------------------------------------------------------------

// A member's units of one kind, as "topic:partition" keys. Consumer groups list topic
// partitions; Connect groups list connectors (unit 0 of the connector) and tasks (unit
// task + 1), which is how the server counts a connector's units in `topics`.
function units(group, member, kind) {
  const keys = new Set();
  if (group.groupType === "connect") {
    const field = { assigned: "connectAssignment", revoking: "connectPendingRevocation", target: "connectTargetAssignment" }[kind];
    const value = member[field] || {};
    for (const c of value.connectors || []) keys.add(`${c}:0`);
    for (const t of value.tasks || []) keys.add(`${t.connector}:${(t.task || 0) + 1}`);
    return keys;
  }
  const field = { assigned: "assignment", revoking: "pendingRevocation", target: "targetAssignment" }[kind];
  for (const tp of (member[field] || {}).topicPartitions || []) {
    for (const p of tp.partitions || []) keys.add(`${tp.topicName || tp.topicId}:${p}`);
  }
  return keys;
}

function cellState(owned, revoking, target, key) {
  if (owned.has(key)) return "owned";
  if (revoking.has(key)) return "revoking";
  if (target.has(key)) return "waiting";
  return "empty";
}

const STATE_TEXT = {
  owned: "owned",
  revoking: "pending revocation",
  waiting: "waiting: in the target, not yet released by its previous owner",
  empty: "not this member's",
};

// Columns: every partition of the topics the group subscribes to, and any other the
// members hold (a deleted topic's, until they release it).
function columns(group, topics, memberUnits) {
  const counts = new Map(topics.map((t) => [t.name, t.numPartitions]));
  for (const sets of memberUnits) {
    for (const set of Object.values(sets)) {
      for (const key of set) {
        const cut = key.lastIndexOf(":");
        const topic = key.slice(0, cut);
        const partition = Number(key.slice(cut + 1));
        counts.set(topic, Math.max(counts.get(topic) || 0, partition + 1));
      }
    }
  }
  const label = group.groupType === "connect" ? (p) => (p === 0 ? "c" : `t${p - 1}`) : (p) => String(p);
  return [...counts.keys()].sort().map((name) => ({
    name,
    partitions: Array.from({ length: counts.get(name) }, (_, p) => ({ p, label: label(p) })),
  }));
}

function renderMatrix(group, topics) {
  const members = group.members || [];
  const memberUnits = members.map((m) => ({
    owned: units(group, m, "assigned"),
    revoking: units(group, m, "revoking"),
    target: units(group, m, "target"),
  }));
  const cols = columns(group, topics, memberUnits);
  const cells = members.length * cols.reduce((n, t) => n + t.partitions.length, 0);
  if (cells > limits.matrixCells) {
    renderCounts(members, memberUnits, cells);
    return;
  }
  document.getElementById("matrix-note").hidden = true;
  const topicRow = el("tr", {}, el("th", { text: group.groupType === "connect" ? "connector" : "topic" }));
  const partitionRow = el("tr", {}, el("th", { text: "member (epoch, state)" }));
  for (const t of cols) {
    topicRow.append(el("th", { className: "topic topic-start", colspan: String(t.partitions.length), text: t.name }));
    t.partitions.forEach((part, i) => {
      partitionRow.append(el("th", { className: i === 0 ? "topic-start" : "", text: part.label }));
    });
  }
  const rows = members.map((m, i) => {
    const row = el("tr", { "data-member": m.memberId }, memberHead(m));
    const sets = memberUnits[i];
    for (const t of cols) {
      t.partitions.forEach((part, j) => {
        const key = `${t.name}:${part.p}`;
        const s = cellState(sets.owned, sets.revoking, sets.target, key);
        row.append(el("td", {
          className: `cell ${s}` + (j === 0 ? " topic-start" : ""),
          "data-state": s,
          "data-topic": t.name,
          "data-partition": String(part.p),
          title: `${m.memberId} · ${t.name}-${part.label}: ${STATE_TEXT[s]}`,
        }));
      });
    }
    return row;
  });
  const table = document.getElementById("matrix");
  table.replaceChildren(el("thead", {}, topicRow, partitionRow), el("tbody", {}, ...rows));
}

// A member's row head: its id, epoch and state, then what tells members apart when their ids
// were generated: the instance id a static member gave, and the host it calls from.
function memberHead(m) {
  const head = el(
    "th",
    { scope: "row", title: memberTitle(m) },
    el("span", { "data-field": "member-id", text: m.memberId }),
    el("span", { className: "epoch", text: ` (${m.memberEpoch}, ${m.memberState})` }),
  );
  if (m.drainState) head.append(el("span", { className: `badge ${m.drainState.toLowerCase()}`, text: m.drainState }));
  const where = [];
  if (m.instanceId) where.push("instance ", el("span", { "data-field": "instance-id", text: m.instanceId }));
  if (m.clientHost) {
    if (where.length) where.push(" · ");
    where.push("host ", el("span", { "data-field": "client-host", text: m.clientHost }));
  }
  if (where.length) head.append(el("span", { className: "where" }, ...where));
  return head;
}

function memberTitle(m) {
  const lines = [["member", m.memberId], ["instance", m.instanceId], ["client", m.clientId], ["host", m.clientHost], ["rack", m.rackId]];
  return lines.filter(([, v]) => v).map(([k, v]) => `${k}: ${v}`).join("\n");
}

// The matrix's fallback for large groups: a row per member with its counts of each state.
function renderCounts(members, memberUnits, cells) {
  const note = document.getElementById("matrix-note");
  note.hidden = false;
  note.textContent = `${cells} cells are too many to draw: each member's partitions are counted instead.`;
  const head = el("tr", {}, ...["member (epoch, state)", "owned", "pending revocation", "waiting"].map((t) => el("th", { text: t })));
  const rows = members.map((m, i) => {
    const sets = memberUnits[i];
    const waiting = [...sets.target].filter((k) => !sets.owned.has(k) && !sets.revoking.has(k)).length;
    return el(
      "tr",
      { "data-member": m.memberId },
      memberHead(m),
      el("td", { "data-count": "owned", text: String(sets.owned.size) }),
      el("td", { "data-count": "revoking", text: String(sets.revoking.size) }),
      el("td", { "data-count": "waiting", text: String(waiting) }),
    );
  });
  document.getElementById("matrix").replaceChildren(el("thead", {}, head), el("tbody", {}, ...rows));
}

function renderSummary(group) {
  const fields = [
    ["state", group.groupState],
    ["type", group.groupType],
    ["group epoch", group.groupEpoch],
    ["assignment epoch", group.assignmentEpoch],
    ["assignor", group.assignorName || "—"],
    ["members", (group.members || []).length],
  ];
  if (group.computingMemberId) fields.push(["computing member", group.computingMemberId]);
  if (group.assignmentError) fields.push(["assignment error", group.assignmentError]);
  const items = fields.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v), "data-field": k })]);
  document.getElementById("group-summary").replaceChildren(...items);
}

// -- the epochs' timeline ------------------------------------------------------------------

function observe(group) {
  const points = state.observed.get(group.groupId) || [];
  const members = {};
  for (const m of group.members || []) members[m.memberId] = m.memberEpoch;
  const last = points[points.length - 1];
  const point = { t: Date.now(), groupEpoch: group.groupEpoch, assignmentEpoch: group.assignmentEpoch, members };
  // One point per change (and the first): the strip is drawn as steps up to now.
  if (!last || last.groupEpoch !== point.groupEpoch || last.assignmentEpoch !== point.assignmentEpoch ||
      JSON.stringify(last.members) !== JSON.stringify(members)) {
    points.push(point);
    if (points.length > TIMELINE_POINTS) points.shift();
  }
  state.observed.set(group.groupId, points);
  return points;
}

// One lane per series (group epoch, assignment epoch, then each member's epoch), each a
// strip of segments labelled with the epoch they held, on a shared time axis: lanes do
// not hide each other as lines on one scale would when the values coincide.
function renderTimeline(points) {
  const width = 900, laneHeight = 22, gap = 4, labelWidth = 150, right = 8, axisHeight = 18;
  const now = Date.now();
  const t0 = Math.min(points[0].t, now - 10000);
  const x = (t) => labelWidth + ((t - t0) / Math.max(1, now - t0)) * (width - labelWidth - right);
  const ids = [...new Set(points.flatMap((p) => Object.keys(p.members)))].sort();
  const lanes = [
    { name: "group epoch", kind: "group", read: (p) => p.groupEpoch },
    { name: "assignment epoch", kind: "assignment", read: (p) => p.assignmentEpoch },
    ...ids.map((id) => ({ name: id, kind: "member", member: id, read: (p) => p.members[id] })),
  ];
  const height = lanes.length * (laneHeight + gap) + axisHeight;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "epochs over time" });
  chart.style.setProperty("height", `${height}px`);
  lanes.forEach((lane, i) => {
    const top = i * (laneHeight + gap);
    const label = svg("text", { x: 0, y: top + laneHeight / 2 + 4, class: `lane-label ${lane.kind}` });
    label.textContent = lane.name.length > 22 ? lane.name.slice(0, 21) + "…" : lane.name;
    const group = svg("g", { class: `lane ${lane.kind}`, "data-lane": lane.member ?? lane.kind });
    group.append(label);
    // Segments: each run of one value, from its first observation to the next change (or now).
    for (let j = 0; j < points.length; j++) {
      const value = lane.read(points[j]);
      if (value === undefined) continue;
      const end = j + 1 < points.length ? points[j + 1].t : now;
      const x1 = x(points[j].t), x2 = x(end);
      const rect = svg("rect", {
        x: x1, y: top, width: Math.max(1, x2 - x1), height: laneHeight,
        class: `segment ${value % 2 ? "odd" : "even"}`, "data-epoch": value,
      });
      const title = svg("title");
      title.textContent = `${lane.name}: ${value} from ${new Date(points[j].t).toLocaleTimeString()}`;
      rect.append(title);
      group.append(rect);
      if (x2 - x1 > 14) {
        const text = svg("text", { x: x1 + 4, y: top + laneHeight / 2 + 4, class: "segment-label" });
        text.textContent = String(value);
        group.append(text);
      }
    }
    chart.append(group);
  });
  const axis = height - 4;
  const since = svg("text", { x: labelWidth, y: axis, class: "axis-label" });
  since.textContent = new Date(t0).toLocaleTimeString();
  const until = svg("text", { x: width - right, y: axis, "text-anchor": "end", class: "axis-label" });
  until.textContent = new Date(now).toLocaleTimeString() + " (now)";
  chart.append(since, until);
  document.getElementById("timeline").replaceChildren(chart);
}

// -- history ------------------------------------------------------------------------------

// The newest events, in a box that scrolls (the page keeps its height), and a button for older
// ones while the replica has more than the page asked for.
function renderEvents(history) {
  const events = history.events || [];
  const more = Boolean(history.more);
  document.getElementById("events-empty").hidden = events.length > 0;
  document.getElementById("events-box").hidden = events.length === 0;
  let shown = "";
  if (events.length > 0) shown = more ? `(the newest ${events.length})` : `(all ${events.length})`;
  if (more && state.eventsLimit >= EVENTS_MAX) shown = `(the newest ${events.length}; "regroup groups history --since" reads older ones)`;
  document.getElementById("events-shown").textContent = shown;
  document.getElementById("events-more").hidden = !more || state.eventsLimit >= EVENTS_MAX;
  const rows = events.map((e) => el(
    "tr",
    { "data-event": e.type },
    el("td", { text: new Date(Number(e.timestampMs)).toLocaleTimeString() }),
    el("td", { text: String(e.type).replace(/^GROUP_EVENT_TYPE_/, "").toLowerCase() }),
    el("td", { text: e.reason || "" }),
    el("td", { text: String(e.groupEpoch ?? "") }),
    el("td", { text: e.memberId || "" }),
    el("td", { className: "message", text: e.message || "" }),
  ));
  document.querySelector("#events tbody").replaceChildren(...rows);
}

// -- polling -----------------------------------------------------------------------------

async function refreshGroup(id) {
  const path = "api/groups/" + encodeURIComponent(id);
  const [described, history] = await Promise.all([getJson(path), getJson(`${path}/events?limit=${state.eventsLimit}`)]);
  if (id !== state.selected) return; // the user moved on meanwhile
  document.getElementById("group-title").textContent = id;
  const error = document.getElementById("group-error");
  if (!described.ok) {
    error.hidden = false;
    error.textContent = described.body.message || `HTTP ${described.status}`;
    document.getElementById("group-summary").replaceChildren();
    document.getElementById("matrix").replaceChildren();
    document.getElementById("timeline").replaceChildren();
  } else {
    error.hidden = true;
    const group = described.body.group;
    renderSummary(group);
    renderMatrix(group, described.body.topics || []);
    renderTimeline(observe(group));
  }
  renderEvents(history.ok ? history.body : {});
}

async function poll() {
  state.timer = null;
  try {
    const listing = await getJson("api/groups");
    if (!listing.ok) throw new Error(listing.body.message || `HTTP ${listing.status}`);
    renderGroups(listing.body);
    if (state.selected !== null) await refreshGroup(state.selected);
    setStatus("live", "live · " + new Date().toLocaleTimeString());
  } catch (e) {
    setStatus("error", `cannot reach the coordinator (${e.message}); retrying`);
  }
  // The next poll once this one is done: a slow answer never piles requests up.
  state.timer = setTimeout(poll, POLL_MS);
}

// Polls at once rather than at the next tick (unless a poll is under way: it reads the state).
function pollNow() {
  if (state.timer !== null) {
    clearTimeout(state.timer);
    poll();
  }
}

function route() {
  state.selected = selectedFromHash();
  state.eventsLimit = EVENTS_PAGE;
  document.getElementById("events-box").scrollTop = 0;
  document.getElementById("group").hidden = state.selected === null;
  document.getElementById("welcome").hidden = state.selected !== null;
  pollNow();
}

function showOlderEvents() {
  state.eventsLimit = Math.min(state.eventsLimit + EVENTS_PAGE, EVENTS_MAX);
  pollNow();
}

window.addEventListener("hashchange", route);
document.getElementById("events-more").addEventListener("click", showOlderEvents);
state.selected = selectedFromHash();
document.getElementById("group").hidden = state.selected === null;
document.getElementById("welcome").hidden = state.selected !== null;
poll();
