// Peers that lie or stall on purpose (issue #44 item 2): a peer that says it is complete and
// answers 404 to every blob, one that answers 503 with Retry-After forever, one that drips a
// byte at a time. A fetch from such peers ends within a bound, with few requests, and beside a
// good peer the good one delivers what the liar holds back.
import t from 'tap';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { AgentError } from '@offline-bundle/agent';
import { layoutEntries } from '@offline-bundle/format';
import { FixedDirectory, MiB, endpoint, peerWorld, treeOf } from './peers-setup.js';

const w = await peerWorld(t, [2 * MiB, 1 * MiB, 512 * 1024]);
let nodes = 0;
const upgradeDir = (n = ++nodes) => join(w.b.dir, `lying-${n}`, 'upgrade');

/** The fetch's error, or Interrupted once `ms` passed: a fetch that never ends fails the test instead of hanging it. */
async function endsWithin(
  ms: number,
  dir: FixedDirectory,
  extra: Parameters<typeof w.fetch>[2] = {},
): Promise<{ err: AgentError | undefined; took: number }> {
  const started = Date.now();
  const err = await w
    .fetch(upgradeDir(), dir, { signal: AbortSignal.timeout(ms), ...extra })
    .result.then(
      () => undefined,
      (e: AgentError) => e,
    );
  return { err, took: Date.now() - started };
}

type Answer = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * A peer that serves the head (bundle.json, signature, a listing that says complete) and answers
 * blob requests with `blob`; `own` answers a path of the head its own way when it returns true.
 */
async function liar(
  host: string,
  blob: Answer,
  own: (path: string, res: ServerResponse) => boolean = () => false,
): Promise<{ url: string; requests: () => number; server: Server }> {
  let requests = 0;
  const server = createServer(
    {
      ca: w.credentials.ca,
      cert: w.credentials.cert,
      key: w.credentials.key,
      requestCert: true,
      rejectUnauthorized: true,
    },
    (req, res) => {
      requests++;
      const path = req.url ?? '';
      if (own(path, res)) return;
      if (path.endsWith('/bundle.json')) return void res.end(w.served.manifestBytes);
      if (path.endsWith('/signature')) return void res.end(w.served.signature);
      if (path.endsWith('/have'))
        return void res.end(JSON.stringify({ complete: true, digests: [] }));
      blob(req, res);
    },
  );
  await new Promise<void>((r) => server.listen(0, host, r));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return {
    url: `https://${host}:${(server.address() as { port: number }).port}`,
    requests: () => requests,
    server,
  };
}

t.test(
  'a peer that claims complete and answers 404 to every blob: the fetch ends soon, after few requests',
  async (t) => {
    const l = await liar('127.0.0.61', (_q, res) => {
      res.statusCode = 404;
      res.end('no');
    });
    const { err, took } = await endsWithin(
      15_000,
      new FixedDirectory([w.approval], [endpoint('liar', l.url)]),
    );
    t.equal(err?.reason, 'NoPeerHasBundle', err?.message);
    t.ok(took < 10_000, `ended after ${took} ms`);
    t.ok(l.requests() < 50, `${l.requests()} requests`);
  },
);

t.test(
  'beside a good peer, a complete peer that answers 404 is asked for no blob twice, and for none once demoted',
  async (t) => {
    let blobAsks = 0;
    const l = await liar('127.0.0.65', (_q, res) => {
      blobAsks++;
      res.statusCode = 404;
      res.end('no');
    });
    const good = await w.server();
    const r = await w.fetch(
      upgradeDir(),
      new FixedDirectory([w.approval], [endpoint('liar', l.url), endpoint('good', good.url)]),
      { streams: 2, signal: AbortSignal.timeout(20_000) },
    ).result;
    t.same(await treeOf(r.target), await treeOf(w.seed), 'complete and right');
    t.ok(blobAsks <= 1, `the liar was asked for ${blobAsks} blobs`);
  },
);

t.test(
  'a peer that answers 503 with Retry-After forever: counted as a try after a few, the fetch ends',
  async (t) => {
    const l = await liar('127.0.0.62', (_q, res) => {
      res.writeHead(503, { 'retry-after': '1' });
      res.end('busy');
    });
    const { err, took } = await endsWithin(
      30_000,
      new FixedDirectory([w.approval], [endpoint('busy', l.url)]),
      { freeBusyAnswers: 3 },
    );
    t.equal(err?.reason, 'NoPeerHasBundle', err?.message);
    t.match(err?.message, /busy answered busy 4 times in a row/);
    t.ok(took < 20_000, `ended after ${took} ms`);
    t.ok(l.requests() < 50, `${l.requests()} requests`);
  },
);

/** Answers a blob request with its right bytes, one every `everyMs`: never idle long enough to be cut for that. */
function drip(everyMs: number) {
  return (req: IncomingMessage, res: ServerResponse) => {
    const digest = (req.url ?? '').split('/').at(-1)!;
    const entry = layoutEntries(w.manifest).find((e) => e.digest === digest);
    void readFile(join(w.seed, entry?.path ?? 'none')).then(
      (bytes) => {
        res.writeHead(200, { 'content-length': bytes.length });
        let at = 0;
        const timer = setInterval(() => {
          if (at < bytes.length) res.write(bytes.subarray(at, ++at));
        }, everyMs);
        res.on('close', () => clearInterval(timer));
      },
      () => {
        res.statusCode = 404;
        res.end();
      },
    );
  };
}

t.test(
  'a peer that drips a byte at a time beside a good one: cut under the minimum rate, its blob comes from the good one',
  async (t) => {
    const l = await liar('127.0.0.63', drip(200));
    const good = await w.server();
    const up = upgradeDir();
    const started = Date.now();
    const { result, counters } = w.fetch(
      up,
      new FixedDirectory([w.approval], [endpoint('drip', l.url), endpoint('good', good.url)]),
      {
        streams: 2,
        signal: AbortSignal.timeout(30_000),
        minRate: { bytes: 64 * 1024, windowMs: 1000 },
      },
    );
    const r = await result;
    const took = Date.now() - started;
    t.ok(took < 15_000, `done after ${took} ms`);
    t.same(await treeOf(r.target), await treeOf(w.seed), 'complete and right');
    t.ok(
      (counters.fetchedFrom.get('drip') ?? 0) < 64 * 1024,
      `the drip sent ${counters.fetchedFrom.get('drip') ?? 0} bytes`,
    );
  },
);

t.test(
  'a fetch from a dripping peer alone ends at its deadline, Interrupted, its partial staging kept',
  async (t) => {
    const l = await liar('127.0.0.64', drip(200));
    const { err, took } = await endsWithin(
      20_000,
      new FixedDirectory([w.approval], [endpoint('drip', l.url)]),
      { deadlineMs: 2000 },
    );
    t.equal(err?.reason, 'Interrupted', err?.message);
    t.match(err?.message ?? '', /deadline/);
    t.ok(took < 5000, `ended after ${took} ms`);
    t.ok(
      await stat(join(upgradeDir(nodes), '1.2.3-amd64.partial')).catch(() => undefined),
      'the partial staging is kept for the next look',
    );
  },
);

t.test(
  'a negative Retry-After is a wait of a second, not none: the 503s do not come back to back',
  async (t) => {
    const l = await liar('127.0.0.66', (_q, res) => {
      res.writeHead(503, { 'retry-after': '-5' });
      res.end('busy');
    });
    const { err, took } = await endsWithin(
      30_000,
      new FixedDirectory([w.approval], [endpoint('busy', l.url)]),
      { freeBusyAnswers: 3 },
    );
    t.equal(err?.reason, 'NoPeerHasBundle', err?.message);
    t.match(err?.message, /busy answered busy 4 times in a row/);
    t.ok(took >= 3000, `4 busy answers, each waited for: ended after ${took} ms`);
  },
);

/** Answers with the start of a long body, a byte every `everyMs`: never idle long enough to be cut for that. */
function dripSmall(everyMs: number, res: ServerResponse): true {
  res.writeHead(200, { 'content-length': 1000, 'content-type': 'application/json' });
  const body = Buffer.from(JSON.stringify({ complete: false, digests: [] }).padEnd(1000));
  let at = 0;
  const timer = setInterval(() => {
    if (at < body.length - 1) res.write(body.subarray(at, ++at));
  }, everyMs);
  res.on('close', () => clearInterval(timer));
  return true;
}

const SMALL_DEADLINE_MS = 1500;

t.test(
  'a peer still fetching that drips its listing beside a good one: dropped at the small-answer deadline, the good one delivers',
  async (t) => {
    const l = await liar(
      '127.0.0.67',
      (_q, res) => {
        res.statusCode = 404;
        res.end('no');
      },
      (path, res) => path.endsWith('/have') && dripSmall(300, res),
    );
    const good = await w.server();
    const started = Date.now();
    const { result, counters } = w.fetch(
      upgradeDir(),
      new FixedDirectory(
        [w.approval],
        [endpoint('drip', l.url, false), endpoint('good', good.url)],
      ),
      {
        streams: 2,
        signal: AbortSignal.timeout(30_000),
        smallDeadlineMs: SMALL_DEADLINE_MS,
      },
    );
    const r = await result;
    const took = Date.now() - started;
    t.ok(took < 4 * SMALL_DEADLINE_MS, `done after ${took} ms`);
    t.same(await treeOf(r.target), await treeOf(w.seed), 'complete and right');
    t.equal(counters.fetchedFrom.get('drip') ?? 0, 0, 'nothing from the drip');
  },
);

t.test(
  'a first peer that drips bundle.json: the next peer serves the head within the small-answer deadline',
  async (t) => {
    const l = await liar(
      '127.0.0.68',
      (_q, res) => {
        res.statusCode = 404;
        res.end('no');
      },
      (path, res) => path.endsWith('/bundle.json') && dripSmall(300, res),
    );
    const good = await w.server();
    const started = Date.now();
    const r = await w.fetch(
      upgradeDir(),
      new FixedDirectory([w.approval], [endpoint('drip', l.url), endpoint('good', good.url)]),
      {
        streams: 2,
        signal: AbortSignal.timeout(30_000),
        smallDeadlineMs: SMALL_DEADLINE_MS,
      },
    ).result;
    t.ok(Date.now() - started < 4 * SMALL_DEADLINE_MS, `done after ${Date.now() - started} ms`);
    t.same(await treeOf(r.target), await treeOf(w.seed), 'complete and right');
  },
);
