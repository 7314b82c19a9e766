// The dashboard page: renders the server's snapshots (Server-Sent Events from /events).
// Every string from the API goes into the page through textContent, never as HTML. A row is
// shown as live only while both the server reads the API and this page hears the server.
/* global document, window, EventSource */
'use strict';

const COLUMNS = [
  'Node',
  'Phase',
  'Progress',
  'Source',
  'Pinned',
  'Holds',
  'Heartbeat',
  'Node Ready',
  'Message',
  'History',
];
const $ = (id) => document.getElementById(id);
const pad = (n) => String(n).padStart(2, '0');
const clock = (t) => {
  const d = new Date(t);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
};

let snapshot;
let streamLostSince;
let lastHeard = Date.now();
const rows = new Map();

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === 'text') e.textContent = v;
    else if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function when(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime())
    ? iso
    : `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function heartbeatText(cell) {
  return `${age(cell.dataset.at)}${cell.dataset.stale ? ' (stale)' : ''}`;
}

function age(iso) {
  const t = Date.parse(iso);
  if (!iso || Number.isNaN(t)) return 'never';
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 90) return `${s} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} days ago`;
}

/** The cells of one node's row, made once; update() fills them. */
function makeRow(node) {
  const tr = el('tr');
  const cells = {};
  const th = el('th', { scope: 'row' });
  tr.append(th);
  cells.node = th;
  for (const name of COLUMNS.slice(1)) {
    // one box per cell: on a phone the cell is a grid of its label and this box
    const box = el('div', { class: 'cell' });
    tr.append(el('td', { 'data-label': name }, box));
    cells[name] = box;
  }
  cells.progressBar = el('progress', { max: '100', 'aria-label': `Progress of ${node}` });
  cells.progressText = el('span', { class: 'progress-text' });
  cells.Progress.append(cells.progressBar, cells.progressText);
  cells.phase = el('span', { class: 'phase' });
  cells.staleTag = el('span', { class: 'stale-tag', text: 'last known' });
  cells.reason = el('span', { class: 'reason' });
  cells.Phase.append(cells.phase, cells.staleTag, cells.reason);
  cells.summary = el('summary');
  cells.timeline = el('ol', { class: 'timeline' });
  cells.details = el('details', {}, cells.summary, cells.timeline);
  cells.noHistory = el('span', { text: '-' });
  cells.History.append(cells.details, cells.noHistory);
  return { tr, cells };
}

/** "12 of 12, 12 pinned" or "9 of 12, 9 pinned; lacks 3: a, b and 1 more" ("…, 2 not known (its list was cut)"): what the node's runtime holds of the bundle. */
function holdsText(h) {
  if (!h || !h.published) return 'not known';
  const pins = h.pinsReported ? `, ${h.pinned} pinned` : ', pins not reported';
  const unknown = h.unknown ? `, ${h.unknown} not known (its list was cut)` : '';
  const lacks = h.missing
    ? `; lacks ${h.missing}: ${h.lacks.join(', ')}${h.missing > h.lacks.length ? ` and ${h.missing - h.lacks.length} more` : ''}`
    : '';
  return `${h.held} of ${h.names}${pins}${unknown}${lacks}`;
}

function update(r, row) {
  const c = r.cells;
  c.node.textContent = row.node;
  c.phase.textContent = row.phase;
  c.phase.className = `phase phase-${row.phase.replace(/[^A-Za-z]/g, '')}`;
  c.reason.textContent = [
    row.reason,
    row.missingRunning ? `missing the running release ${row.missingRunning}` : '',
  ]
    .filter(Boolean)
    .join('; ');
  const p = row.progress || {};
  if (p.percent === undefined) c.progressBar.removeAttribute('value');
  else c.progressBar.value = p.percent;
  c.progressBar.hidden = p.percent === undefined && !p.done;
  c.progressText.textContent =
    [p.percent !== undefined ? `${p.percent}%` : '', p.done, p.rate, p.eta]
      .filter(Boolean)
      .join(' · ') || '-';
  c.Source.textContent = row.source || '-';
  c.Pinned.textContent =
    row.pinned === 'True' ? 'yes' : row.pinned === 'False' ? 'no' : row.pinned || '-';
  c.Holds.textContent = holdsText(row.holdings);
  c.Holds.className =
    row.holdings && (row.holdings.missing || row.holdings.unknown) ? 'cell no' : 'cell';
  c.Holds.title =
    row.holdings && row.holdings.published
      ? 'image names of the bundle its container runtime holds, as its agent last published'
      : 'its agent publishes nothing of its runtime (an older agent, or no load since it started)';
  c.Heartbeat.dataset.at = row.heartbeat || '';
  c.Heartbeat.dataset.stale = row.stale ? 'yes' : '';
  c.Heartbeat.textContent = heartbeatText(c.Heartbeat);
  c.Heartbeat.className = row.stale ? 'cell no' : 'cell';
  c.Heartbeat.title = row.heartbeat
    ? `${row.heartbeat}${row.stale ? ': the agent has not reported for three of its heartbeats, so this row may no longer hold' : ''}`
    : 'never reported';
  // a row whose agent went quiet is last known, whatever the API says
  r.agentStale = row.stale === true;
  c.staleTag.textContent = r.agentStale ? 'stale' : 'last known';
  c['Node Ready'].textContent = row.nodeReady ? 'Ready' : 'Not Ready';
  c['Node Ready'].className = row.nodeReady ? 'cell' : 'cell no';
  c.Message.textContent = row.technician || row.message || '-';
  const h = row.history || [];
  c.details.hidden = h.length === 0;
  c.noHistory.hidden = h.length > 0;
  c.summary.textContent = `${h.length} ${h.length === 1 ? 'entry' : 'entries'}`;
  c.timeline.replaceChildren(
    ...h.map((e) =>
      el(
        'li',
        {},
        el('span', { class: `state state-${e.state.replace(/[^a-z]/g, '')}`, text: e.state }),
        ` ${e.version}`,
        e.at ? el('time', { datetime: e.at, text: ` · ${when(e.at)}` }) : '',
      ),
    ),
  );
}

function renderTarget(s) {
  const t = s.target;
  $('target-file').textContent =
    t.file ||
    (t.digest ? 'the one most Ready nodes report' : 'none yet: no node is Ready for a bundle');
  $('target-digest').textContent = t.digest || '';
  $('target-version').textContent = t.version || '-';
  $('target-running').textContent = t.running || 'unknown (no ClusterVersion)';
  const ready = s.rows.filter((r) => r.ready).length;
  $('target-summary').textContent = s.rows.length
    ? `${ready} of ${s.rows.length} Ready for it${t.ready ? ': the upgrade can start' : ''}`
    : t.summary;
  $('warnings').replaceChildren(
    ...s.warnings.map((w) =>
      el(
        'li',
        {},
        el('span', { class: 'kind', text: w.kind }),
        el('span', { class: 'object', text: w.object }),
        w.message,
      ),
    ),
  );
  // before the first read there are no warnings to speak of, not none
  const read = !!(s.api && s.api.lastOk);
  $('no-warnings').hidden = s.warnings.length > 0;
  $('no-warnings').textContent = read ? 'None.' : 'Not read yet.';
  $('no-warnings').className = read ? '' : 'unread';
}

/** The update path, release by release, as `bundle cluster status` reads it; hidden for a bundle of one release. */
function renderPath(s) {
  const p = s.path;
  $('path-box').hidden = !p;
  $('path-line').textContent = p ? p.line : '';
  $('path-releases').replaceChildren(
    ...(p ? p.releases : []).map((r) =>
      el(
        'li',
        { class: `path-${r.state.replace(/[^a-z]/g, '')}` },
        el('span', { class: 'path-version', text: r.version }),
        ' ',
        el('span', { class: 'path-state', text: r.state }),
        r.acks && r.acks.length
          ? el('span', { class: 'path-acks', text: `: ${r.acks.join(', ')}` })
          : '',
      ),
    ),
  );
}

function renderRows(s) {
  const seen = new Set();
  const body = $('rows');
  s.rows.forEach((row, i) => {
    seen.add(row.node);
    let r = rows.get(row.node);
    if (!r) {
      r = makeRow(row.node);
      rows.set(row.node, r);
    }
    update(r, row);
    if (body.children[i] !== r.tr) body.insertBefore(r.tr, body.children[i] || null);
  });
  for (const [node, r] of rows)
    if (!seen.has(node)) {
      r.tr.remove();
      rows.delete(node);
    }
  $('omitted').hidden = !s.omitted;
  $('omitted').textContent = s.omitted
    ? `${s.omitted} more nodes not shown: narrow with --selector.`
    : '';
}

/** Banners and the rows' live/stale marks, from the API's and the stream's state. */
function renderContact() {
  const api = snapshot && snapshot.api;
  // before the first read there is nothing to call stale (and no rows)
  const apiLost = !!(api && !api.ok && api.lostSince);
  $('api-lost').hidden = !apiLost;
  $('api-lost').replaceChildren(
    ...(apiLost
      ? [
          `Lost contact with the API since ${clock(api.lostSince)}; rows show the last known state${api.lastOk ? ` (read at ${clock(api.lastOk)})` : ''}.`,
          el('span', { class: 'detail', text: api.error || '' }),
        ]
      : []),
  );
  $('stream-lost').hidden = streamLostSince === undefined;
  $('stream-lost').textContent =
    streamLostSince === undefined
      ? ''
      : `Lost the dashboard server since ${clock(streamLostSince)}; rows show the last known state. Is "bundle cluster dashboard" still running?`;
  const stale = apiLost || streamLostSince !== undefined;
  document.body.classList.toggle('stale', stale);
  for (const r of rows.values()) r.tr.classList.toggle('stale', stale || r.agentStale);
  $('updated').textContent =
    api && api.lastOk ? `(${stale ? 'last read' : 'live, read'} at ${clock(api.lastOk)})` : '';
}

function streamLost() {
  if (streamLostSince === undefined) streamLostSince = Date.now();
  renderContact();
}

/** Drops in a row (each within a minute of the last), and when the last came: the reconnect's backoff. */
let reloads = 0;
let lastReload = 0;

function connect() {
  const es = new EventSource('/events');
  es.addEventListener('open', () => {
    streamLostSince = undefined;
    lastHeard = Date.now();
    renderContact();
  });
  es.addEventListener('state', (e) => {
    lastHeard = Date.now();
    streamLostSince = undefined;
    snapshot = JSON.parse(e.data);
    renderTarget(snapshot);
    renderPath(snapshot);
    renderRows(snapshot);
    renderContact();
  });
  es.addEventListener('poll', (e) => {
    lastHeard = Date.now();
    if (streamLostSince !== undefined) {
      streamLostSince = undefined;
      renderContact();
    }
    if (snapshot && snapshot.api.ok) {
      snapshot.api.lastOk = JSON.parse(e.data).at;
      renderContact();
    }
  });
  // the server dropped this stream (the page fell behind): a new one starts with the whole
  // snapshot, after a pause that grows while drops repeat (a slow link must not loop on 16 MiB)
  es.addEventListener('reload', () => {
    es.close();
    reloads = Date.now() - lastReload < 60000 ? reloads + 1 : 0;
    lastReload = Date.now();
    const pause = Math.min(30000, 1000 * 2 ** reloads) * (0.5 + Math.random() / 2);
    window.setTimeout(connect, pause);
  });
  // the browser retries on its own (the server's retry: 2000); until then, the rows are not live
  es.onerror = streamLost;
}

window.setInterval(() => {
  for (const r of rows.values()) r.cells.Heartbeat.textContent = heartbeatText(r.cells.Heartbeat);
  // a server that stopped polling (hung) sends nothing: three intervals and a read's timeout of silence is lost too
  const quiet = snapshot ? 3 * snapshot.intervalMs + 35000 : Infinity;
  if (streamLostSince === undefined && Date.now() - lastHeard > quiet) streamLost();
}, 1000);

connect();
