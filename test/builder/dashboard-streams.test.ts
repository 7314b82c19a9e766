// The dashboard's event streams against pages that never read (issue #44 item 7): 16 streams
// that never read and 5,000 nodes of the longest strings held 3.28 GB, a copy of the snapshot
// per stream. Now one serialization, cut to MAX_SNAPSHOT_BYTES, is shared; a stream two changes
// behind is dropped to 'reload'; and a page that reads gets every change meanwhile.
import t from 'tap';
import { EventEmitter } from 'node:events';
import { request, type IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { loadAssets, pageDir } from '../../builder/dist/dashboard/assets.js';
import { startDashboardServer } from '../../builder/dist/dashboard/server.js';
import { STREAM_STALL_MS } from '../../builder/dist/dashboard/sse.js';
import { cutSnapshot, MAX_SNAPSHOT_BYTES } from '../../builder/dist/dashboard/snapshot-size.js';
import type { DashboardRow, Snapshot } from '../../builder/dist/dashboard/snapshot.js';
import { until } from '../helpers/until.js';

const MB = 1024 * 1024;
const NODES = 5000;
const STALLED = 16;
/** What the server may grow by with STALLED streams not reading: a few snapshots, never one per stream. */
const RSS_BOUND = 320 * MB;
// control characters: each is six bytes as JSON, the most a string of the CRD's length can cost
const LONG = '\u0001'.repeat(1024);

function hostileRows(): DashboardRow[] {
  const history = Array.from({ length: 4 }, () => ({
    version: LONG.slice(0, 128),
    state: LONG.slice(0, 32),
    at: LONG.slice(0, 64),
  }));
  return Array.from({ length: NODES }, (_, i) => ({
    node: `worker-${i}`,
    nodeReady: true,
    phase: 'Failed',
    ready: false,
    reason: LONG,
    message: LONG,
    technician: LONG,
    progress: {},
    history,
  }));
}

function snapshot(rows: DashboardRow[], summary: string): Snapshot {
  return {
    rows,
    omitted: 0,
    warnings: [],
    intervalMs: 2000,
    target: { ready: false, summary },
    api: { ok: true },
  };
}

function fakeFeed(s: Snapshot) {
  const f = new EventEmitter() as EventEmitter & { snapshot: Snapshot };
  f.snapshot = s;
  // a listener pair per page: more pages than the default warns of
  f.setMaxListeners(0);
  return f;
}

/** A page that reads: the summaries of the state events it got, and the size of the largest event. */
function goodPage(
  port: number,
): Promise<{ seen: Set<string>; largest: () => number; res: IncomingMessage }> {
  return new Promise((resolve, reject) => {
    const seen = new Set<string>();
    let run = 0;
    let largest = 0;
    let tail = '';
    const req = request(
      { host: '127.0.0.1', port, path: '/events', headers: { Host: `127.0.0.1:${port}` } },
      (res) => {
        res.on('data', (c: Buffer) => {
          const text = c.toString('latin1');
          for (const m of (tail + text).matchAll(/"summary":"(change-\d+)"/g)) seen.add(m[1]!);
          // an event ends at a blank line; one split across chunks is counted whole all the same
          let from = tail.endsWith('\n') && text.startsWith('\n') ? 1 : 0;
          if (from) {
            largest = Math.max(largest, run);
            run = 0;
          }
          for (let at = text.indexOf('\n\n', from); at >= 0; at = text.indexOf('\n\n', from)) {
            largest = Math.max(largest, run + at - from);
            run = 0;
            from = at + 2;
          }
          run += text.length - from;
          tail = (tail + text).slice(-64);
        });
        resolve({ seen, largest: () => largest, res });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

t.test(
  `cutSnapshot: over MAX_SNAPSHOT_BYTES (${MAX_SNAPSHOT_BYTES / MB} MiB) the rows that fit are kept and the cut is named`,
  async (t) => {
    const small = snapshot(hostileRows().slice(0, 3), 'x');
    t.equal(cutSnapshot(small), small, 'a snapshot within the bound is passed on as it is');
    const s = snapshot(hostileRows(), 'x');
    const cut = cutSnapshot(s);
    const bytes = Buffer.byteLength(JSON.stringify(cut));
    t.ok(
      bytes <= MAX_SNAPSHOT_BYTES,
      `${(bytes / MB).toFixed(1)} MiB as JSON, not ${((Buffer.byteLength(JSON.stringify(s.rows[0])) * NODES) / MB).toFixed(0)} MiB`,
    );
    t.ok(cut.rows.length > 0 && cut.rows.length < NODES, `${cut.rows.length} rows kept`);
    t.equal(
      cut.omitted,
      NODES - cut.rows.length,
      'the rest counted: the page says how many are not shown',
    );
    t.equal(cut.warnings[0]!.kind, 'SnapshotCut');
    t.match(
      cut.warnings[0]!.message,
      new RegExp(
        `over 16 MiB as the page gets it: ${NODES - cut.rows.length} nodes and 0 warnings are not shown; narrow with --selector \\(${NODES - cut.rows.length} of them not ready\\)`,
      ),
    );
    t.same(cut.rows[0], s.rows[0], 'kept rows are whole');

    // ready nodes sort first by name; the few that are not, late in the alphabet, must not be the ones cut
    const mixed = hostileRows().map((r, i) => ({
      ...r,
      node: `node-${String(i).padStart(4, '0')}`,
      ready: i >= NODES - 5 ? false : true,
      phase: i >= NODES - 5 ? 'Failed' : 'Ready',
    }));
    const kept = cutSnapshot(snapshot(mixed, 'y'));
    t.same(
      kept.rows.filter((r) => !r.ready).map((r) => r.node),
      mixed.slice(-5).map((r) => r.node),
      'every node that is not ready is kept',
    );
    t.same(
      kept.rows.map((r) => r.node),
      [...kept.rows.map((r) => r.node)].sort(),
      'shown by name',
    );
    t.notMatch(
      kept.warnings[0]!.message,
      /not ready\)/,
      'none of those cut is a node that needs the admin',
    );
  },
);

t.test(
  "the page reconnects on the server's reload, after a pause that grows while drops repeat",
  async (t) => {
    const app = await readFile(path.join(pageDir(), 'app.js'), 'utf8');
    t.match(
      app,
      /addEventListener\('reload', \(\) => \{\s+es\.close\(\);[\s\S]{0,300}2 \*\* reloads[\s\S]{0,120}window\.setTimeout\(connect, pause\)/,
    );
  },
);

t.test(
  `${STALLED} streams that never read, ${NODES} nodes of long strings: the server stays small and a page that reads gets every change`,
  async (t) => {
    const rows = hostileRows();
    const feed = fakeFeed(snapshot([], 'start'));
    const s = await startDashboardServer({
      port: 0,
      assets: await loadAssets(),
      feed,
      maxClients: STALLED + 1,
    });
    t.teardown(() => s.close());
    const stalled: Socket[] = [];
    t.teardown(() => {
      for (const c of stalled) c.destroy();
    });
    for (let i = 0; i < STALLED; i++) {
      // sends the request and never reads: the kernel's buffers fill, then the server's
      const c = connect(s.port, '127.0.0.1');
      c.pause();
      c.on('error', () => undefined);
      c.write(`GET /events HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\n\r\n`);
      stalled.push(c);
    }
    await until('the stalled pages are counted', () => s.clients() === STALLED);
    const page = await goodPage(s.port);
    t.teardown(() => page.res.destroy());
    await until('the reading page is counted', () => s.clients() === STALLED + 1);

    const base = process.memoryUsage.rss();
    let most = base;
    const sample = () => {
      most = Math.max(most, process.memoryUsage.rss());
      return false;
    };
    const CHANGES = 4;
    for (let i = 0; i < CHANGES; i++) {
      const next = snapshot(rows, `change-${i}`);
      feed.snapshot = next;
      feed.emit('change', next);
      sample();
      if (most - base > RSS_BOUND) break;
      await until(
        `the reading page got change-${i}`,
        () => sample() || page.seen.has(`change-${i}`),
        { timeoutMs: 60_000, stepMs: 50 },
      );
    }
    const grew = most - base;
    t.comment(
      `${STALLED} stalled streams, ${CHANGES} changes of ${NODES} hostile rows: RSS grew by at most ${(grew / MB).toFixed(0)} MiB; largest event ${(page.largest() / MB).toFixed(1)} MiB`,
    );
    t.ok(
      grew <= RSS_BOUND,
      `RSS grew by ${(grew / MB).toFixed(0)} MiB, within ${RSS_BOUND / MB} MiB`,
    );
    t.same(
      [...page.seen].sort(),
      Array.from({ length: CHANGES }, (_, i) => `change-${i}`),
      'the reading page got every change',
    );
    t.ok(
      page.largest() <= MAX_SNAPSHOT_BYTES + 64,
      `no event over the bound (${page.largest()} bytes)`,
    );
    await until('the stalled streams are dropped, their slots free', () => s.clients() === 1, {
      timeoutMs: 10_000,
    });
    t.equal(s.clients(), 1, 'only the reading page is left');
  },
);

t.test(
  `a stream backed up for STREAM_STALL_MS (${STREAM_STALL_MS / 1000} s) with no change to come is dropped: it holds a slot`,
  async (t) => {
    const feed = fakeFeed(snapshot([], 'start'));
    const s = await startDashboardServer({ port: 0, assets: await loadAssets(), feed });
    t.teardown(() => s.close());
    const c = connect(s.port, '127.0.0.1');
    t.teardown(() => c.destroy());
    c.pause();
    c.on('error', () => undefined);
    c.write(`GET /events HTTP/1.1\r\nHost: 127.0.0.1:${s.port}\r\n\r\n`);
    await until('the stalled page is counted', () => s.clients() === 1);
    // one change the socket cannot take, then a quiet cluster
    const next = snapshot(hostileRows().slice(0, 500), 'change-0');
    feed.snapshot = next;
    feed.emit('change', next);
    t.ok(s.backlog()[0]!.bytes > 0, 'backed up');
    const started = Date.now();
    await until('the stalled stream is dropped', () => s.clients() === 0, {
      timeoutMs: STREAM_STALL_MS * 2 + 5000,
      stepMs: 250,
    });
    const after = Date.now() - started;
    t.ok(
      after >= STREAM_STALL_MS - 1000,
      `dropped after ${(after / 1000).toFixed(0)} s, not before the bound`,
    );
  },
);
