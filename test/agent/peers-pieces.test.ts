// Pieces verified as they arrive and relayed before the blob is whole (issue #42 item 2): a head
// with `pieces` (format pieces.ts) lets a node check each piece of a large blob on arrival and
// serve it to the others at once. Real mutual-TLS peer servers on 127.0.0.x, the seed's upload
// capped so that a node is still fetching a blob while another asks it for its first pieces. The
// head is the world's own bundle.json with `pieces` added and signed again with the test key
// (until `bundle create` writes them); a bundle without `pieces` and a peer that lists no pieces
// (an older agent) fetch as before.
import t from 'tap';
import { mkdir, readFile, truncate, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import {
  MAX_PIECE_MISSES,
  PeerClient,
  ServedBundle,
  prefixBitmap,
  type PeerApproval,
  type PeerDirectory,
  type PeerOffer,
} from '@offline-bundle/agent';
import { MIN_PIECE_BYTES, WRITING_SUFFIX, layoutEntries } from '@offline-bundle/format';
import { FixedDirectory, MiB, altered, endpoint, peerWorld, treeOf } from './peers-setup.js';
import { piecesSeed } from './peers-pieces-seed.js';

const PS = MIN_PIECE_BYTES;
const w = await peerWorld(t, [6 * MiB + 4321, 2 * MiB + 7, 256 * 1024]);
const big = w.manifest.blobs.find((b) => b.size > 6 * MiB)!.digest;

const p = await piecesSeed(w);

interface Served {
  digest: string;
  start: number;
  end: number;
  partial: boolean;
}

/** `offer` with every range it opens logged, and whether the blob was held only in part then. */
function logged(
  offer: () => PeerOffer | undefined,
  log: Served[],
): (d: string) => PeerOffer | undefined {
  return () => {
    const o = offer();
    if (!o) return undefined;
    return {
      manifestDigest: o.manifestDigest,
      manifestBytes: o.manifestBytes,
      signature: o.signature,
      get complete() {
        return o.complete;
      },
      verifiedDigests: (n) => o.verifiedDigests(n),
      size: (d) => o.size(d),
      partialPieces: (n) => o.partialPieces?.(n) ?? {},
      partial: (d) => o.partial?.(d),
      open: (d, start, end) => {
        log.push({ digest: d, start, end, partial: o.size(d) === undefined });
        return o.open(d, start, end);
      },
    };
  };
}

/** A node that fetches `approval` and serves what it verified (blobs, and pieces of those still arriving), as PeerService does. */
async function fetchingNode(name: string, approval: PeerApproval, log: Served[]) {
  let offer: ServedBundle | undefined;
  const server = await w.server({ bundle: logged(() => offer, log) });
  const run = (directory: PeerDirectory, extra: Parameters<typeof w.fetch>[2] = {}) =>
    w.fetch(join(w.b.dir, name, 'upgrade'), directory, {
      approval,
      streams: 1,
      peerRefreshMs: 200,
      onStaging: (head, partial, target) => {
        offer = ServedBundle.staging(partial, target, head);
      },
      onVerified: (e) => offer?.verified(e.digest),
      onPieces: (e, bytes) => offer?.verifiedPrefix(e.digest, bytes),
      ...extra,
    });
  return { server, run, offer: () => offer, endpoint: endpoint(name, server.url, false) };
}

async function until(what: string, ok: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`waited ${ms} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

t.test(
  'node-b serves node-c the pieces of a blob it verified while its own copy of that blob is not complete; node-c completes from node-b alone',
  async (t) => {
    const seed = await w.server({ offer: p.served, uploadBytesPerSecond: 2 * MiB });
    const bLog: Served[] = [];
    const b = await fetchingNode('relay-b', p.approval, bLog);
    const fb = b.run(new FixedDirectory([p.approval], [endpoint('seed', seed.url)]));
    // node-c starts once node-b holds two pieces of the big blob, and knows node-b only
    await until(
      'node-b to verify two pieces of the big blob',
      () => (b.offer()?.partial(big)?.verified ?? 0) >= 2 * PS,
    );
    const cLog: Served[] = [];
    const c = await fetchingNode('relay-c', p.approval, cLog);
    const fc = c.run(new FixedDirectory([p.approval], [b.endpoint]));
    const started = Date.now();
    const [rb, rc] = await Promise.all([
      fb.result.then((r) => {
        t.comment(`node-b done ${Date.now() - started} ms after node-c began`);
        return r;
      }),
      fc.result.then((r) => {
        t.comment(`node-c done ${Date.now() - started} ms after it began`);
        return r;
      }),
    ]);
    const relayed = bLog.filter((s) => s.digest === big && s.partial);
    t.comment(
      `node-b served of the big blob: ${JSON.stringify(bLog.filter((s) => s.digest === big))}`,
    );
    t.ok(
      relayed.length > 0,
      'node-b served ranges of the big blob while its own copy was not whole',
    );
    t.ok(
      relayed.every(
        (s) =>
          s.start % PS === 0 &&
          (s.end % PS === 0 || s.end === w.manifest.blobs.find((x) => x.digest === big)!.size),
      ),
      'each a run of whole pieces',
    );
    t.same([...fc.counters.fetchedFrom.keys()], ['relay-b'], 'node-c fetched from node-b alone');
    t.same(await treeOf(rc.target), await treeOf(p.dir), 'node-c has the bundle byte for byte');
    t.same(await treeOf(rb.target), await treeOf(p.dir), 'node-b too');
    t.same([...fb.counters.suspect, ...fc.counters.suspect], [], 'no peer suspect');
  },
);

/** A stand-in for a lying peer: its offer flips one byte of piece 2 of the big blob. */
const flipPiece2 = (d: string, data: Readable, start: number): Readable => {
  if (d !== big) return data;
  let at = start;
  const out = data.pipe(
    new Transform({
      transform(chunk: Buffer, _e, cb) {
        const flip = 2 * PS + 100 - at;
        at += chunk.length;
        if (flip < 0 || flip >= chunk.length) return cb(null, chunk);
        const out = Buffer.from(chunk);
        out[flip] = out[flip]! ^ 1;
        cb(null, out);
      },
    }),
  );
  // the file under it closed when the response is cut
  out.on('close', () => data.destroy());
  return out;
};

t.test(
  'a lying peer (stand-in offer that flips a byte of piece 2) is refused for that piece, marked suspect, and the piece comes from an honest peer',
  async (t) => {
    const liar = await w.server({ offer: altered(p.served, flipPiece2) });
    const honestLog: Served[] = [];
    const honest = await w.server({ bundle: logged(() => p.served, honestLog) });
    // random 0: every blob is asked of the first holder listed, the liar, until it is suspect
    const f = w.fetch(
      join(w.b.dir, 'lied-to', 'upgrade'),
      new FixedDirectory(
        [p.approval],
        [endpoint('liar', liar.url), endpoint('honest', honest.url)],
      ),
      {
        approval: p.approval,
        streams: 1,
        random: () => 0,
      },
    );
    const r = await f.result;
    t.same([...f.counters.suspect], ['liar'], 'the liar is suspect');
    const bigAsks = honestLog.filter((s) => s.digest === big);
    t.same(
      bigAsks.map((s) => s.start),
      [2 * PS],
      'the honest peer was asked for the big blob from piece 2 on: the two verified pieces were kept',
    );
    t.ok(
      (f.counters.fetchedFrom.get('liar') ?? 0) >= 2 * PS,
      "the liar's verified pieces counted as fetched from it",
    );
    t.same(
      await treeOf(r.target),
      await treeOf(p.dir),
      'the layout is the signed one byte for byte',
    );
  },
);

t.test(
  'a partial peer answers a range outside its verified pieces, or a whole blob it holds in part, as a blob not held (404)',
  async (t) => {
    const seed = await w.server({ offer: p.served, uploadBytesPerSecond: 2 * MiB });
    const b = await fetchingNode('ranges-b', p.approval, []);
    const fb = b.run(new FixedDirectory([p.approval], [endpoint('seed', seed.url)]));
    await until(
      'node-b to verify a piece of the big blob',
      () => (b.offer()?.partial(big)?.verified ?? 0) >= PS,
    );
    const client = new PeerClient({ credentials: w.credentials });
    t.teardown(() => client.close());
    const url = `${b.server.url}/v1/bundles/${p.approval.manifestDigest}/blobs/${big}`;
    const signal = AbortSignal.timeout(10_000);
    const have = JSON.parse(
      (
        await client.small(
          `${b.server.url}/v1/bundles/${p.approval.manifestDigest}/have`,
          1 << 20,
          signal,
        )
      ).toString(),
    ) as { pieces?: Record<string, string> };
    t.ok(have.pieces?.[big], "/have lists the big blob's verified pieces");
    const res = await client.get(url, signal, { range: `bytes=0-${PS - 1}` });
    const got: Buffer[] = [];
    for await (const c of res) got.push(c as Buffer);
    t.equal(res.statusCode, 206);
    t.ok(
      Buffer.concat(got).equals(
        (await readFile(join(p.dir, 'blobs', 'sha256', big.slice(7)))).subarray(0, PS),
      ),
      'piece 0, right',
    );
    const status = (headers: Record<string, string>) =>
      client.get(url, signal, headers).then(
        (r) => {
          r.resume();
          return r.statusCode;
        },
        (e: { kind: string }) => e.kind,
      );
    t.equal(
      await status({ range: `bytes=0-${7 * PS}` }),
      'missing',
      'past the verified pieces: 404',
    );
    t.equal(await status({}), 'missing', 'the whole blob: 404');
    await fb.result;
  },
);

/** The status of a `method` request for `url` with the world's peer keys (PeerClient asks GET only). */
function statusOf(
  url: string,
  method: 'GET' | 'HEAD',
  headers: Record<string, string> = {},
): Promise<{ status: number; bytes: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method,
        headers,
        ...w.credentials,
        minVersion: 'TLSv1.3',
        agent: false,
        checkServerIdentity: () => undefined,
      },
      (res) => {
        const got: Buffer[] = [];
        res.on('data', (c: Buffer) => got.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes: Buffer.concat(got) }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

t.test(
  'a node holding every piece of a blob before its rename serves it whole without a Range; pieces announced but not on disk are answered busy (503), for HEAD as for GET',
  async (t) => {
    const partial = join(w.b.dir, 'announced', 'partial');
    const entry = layoutEntries(p.served.manifest).find((e) => e.digest === big)!;
    const bytes = await readFile(join(p.dir, entry.path));
    await mkdir(join(partial, 'blobs', 'sha256'), { recursive: true });
    const temp = join(partial, entry.path + WRITING_SUFFIX);
    await writeFile(temp, bytes);
    const offer = ServedBundle.staging(partial, join(w.b.dir, 'announced', 'target'), p.served);
    offer.verifiedPrefix(big, entry.size);
    const server = await w.server({ offer });
    const url = `${server.url}/v1/bundles/${p.approval.manifestDigest}/blobs/${big}`;
    const whole = await statusOf(url, 'GET');
    t.equal(whole.status, 200, 'no Range: the whole blob (all its pieces are verified)');
    t.ok(whole.bytes.equals(bytes), 'byte for byte');
    // the temp file shorter than announced (a write not landed): the asker is told to come back, not that the blob is missing
    await truncate(temp, 2 * PS);
    const range = { range: `bytes=0-${3 * PS - 1}` };
    t.equal((await statusOf(url, 'GET', range)).status, 503, 'GET: busy');
    t.equal(
      (await statusOf(url, 'HEAD', range)).status,
      503,
      'HEAD: busy too, the disk looked at as for GET',
    );
    t.equal(
      (await statusOf(url, 'HEAD', { range: `bytes=0-${2 * PS - 1}` })).status,
      206,
      'HEAD of what is on disk: 206',
    );
    t.ok(server.counters.busyRefusals >= 2, 'counted as busy refusals');
  },
);

t.test(
  'a bundle without pieces: a node still fetching lists no pieces and serves whole blobs only, and the fetch is as before',
  async (t) => {
    const seed = await w.server({ uploadBytesPerSecond: 4 * MiB });
    const bLog: Served[] = [];
    const b = await fetchingNode('plain-b', w.approval, bLog);
    const fb = b.run(new FixedDirectory([w.approval], [endpoint('seed', seed.url)]), {
      approval: w.approval,
    });
    await until('node-b to begin the big blob', () => b.offer() !== undefined);
    const c = await fetchingNode('plain-c', w.approval, []);
    const fc = c.run(new FixedDirectory([w.approval], [b.endpoint, endpoint('seed', seed.url)]), {
      approval: w.approval,
    });
    await until(
      'node-b to be part way',
      () => fb.counters.bytesFetched > 0 || (b.offer()?.verifiedDigests(99).length ?? 0) > 0,
    );
    t.same(b.offer()!.partialPieces(99), {}, 'no pieces listed');
    const [rb, rc] = await Promise.all([fb.result, fc.result]);
    t.ok(
      bLog.every((s) => !s.partial),
      'node-b served whole verified blobs only',
    );
    t.same(await treeOf(rc.target), await treeOf(w.seed), 'node-c has the bundle');
    t.same(await treeOf(rb.target), await treeOf(w.seed), 'node-b too');
  },
);

t.test(
  'a peer that lists no pieces (an older agent, stand-in offer) beside the seed: a bundle with pieces fetches from both',
  async (t) => {
    const seed = await w.server({ offer: p.served, uploadBytesPerSecond: 8 * MiB });
    const oldLog: Served[] = [];
    const older: PeerOffer = {
      manifestDigest: p.served.manifestDigest,
      manifestBytes: p.served.manifestBytes,
      signature: p.served.signature,
      complete: false,
      verifiedDigests: (n) => p.served.verifiedDigests(n).filter((d) => d !== big),
      size: (d) => (d === big ? undefined : p.served.size(d)),
      open: (d, s, e) => {
        oldLog.push({ digest: d, start: s, end: e, partial: false });
        return p.served.open(d, s, e);
      },
    };
    const old = await w.server({ offer: older });
    const f = w.fetch(
      join(w.b.dir, 'beside-old', 'upgrade'),
      new FixedDirectory(
        [p.approval],
        [endpoint('seed', seed.url), endpoint('older', old.url, false)],
      ),
      { approval: p.approval, streams: 2 },
    );
    const r = await f.result;
    t.ok(
      oldLog.length > 0 && oldLog.every((s) => s.digest !== big),
      'the older peer sent whole blobs it holds',
    );
    t.same(await treeOf(r.target), await treeOf(p.dir), 'the layout is the signed one');
    t.same([...f.counters.suspect], [], 'no peer suspect');
  },
);

t.test(
  `a partial peer (stand-in offer) that lists pieces it does not hold: asked for that blob at most MAX_PIECE_MISSES (${MAX_PIECE_MISSES}) times, never suspect, the blob from the seed`,
  async (t) => {
    const size = w.manifest.blobs.find((b) => b.digest === big)!.size;
    let asked = 0;
    const claims: PeerOffer = {
      manifestDigest: p.served.manifestDigest,
      manifestBytes: p.served.manifestBytes,
      signature: p.served.signature,
      complete: false,
      verifiedDigests: (n) => p.served.verifiedDigests(n).filter((d) => d !== big),
      size: (d) => (d === big ? undefined : p.served.size(d)),
      partialPieces: () => ({ [big]: prefixBitmap(size, PS, size) }),
      // every piece listed, none held: each range of them is answered 404
      partial: (d) => {
        if (d === big) asked++;
        return d === big ? { size, verified: 0 } : undefined;
      },
      open: (d, s, e) => p.served.open(d, s, e),
    };
    const claimer = await w.server({ offer: claims });
    // alone, it would be asked again at every look while its listing stands
    const alone = await w
      .fetch(
        join(w.b.dir, 'claims-alone', 'upgrade'),
        new FixedDirectory([p.approval], [endpoint('claimer', claimer.url, false)]),
        {
          approval: p.approval,
          streams: 1,
          peerRefreshMs: 100,
          stallMs: 4000,
        },
      )
      .result.then(
        () => undefined,
        (e: { reason?: string; message: string }) => e,
      );
    t.equal(alone?.reason, 'NoPeerHasBundle', alone?.message ?? 'no error');
    t.equal(asked, MAX_PIECE_MISSES, 'asked for the big blob that many times in a fetch of 4 s');
    asked = 0;
    const seed = await w.server({ offer: p.served });
    const f = w.fetch(
      join(w.b.dir, 'claims', 'upgrade'),
      new FixedDirectory(
        [p.approval],
        [endpoint('claimer', claimer.url, false), endpoint('seed', seed.url)],
      ),
      {
        approval: p.approval,
        streams: 1,
        random: () => 0,
        peerRefreshMs: 100,
      },
    );
    const r = await f.result;
    t.ok(asked >= 1 && asked <= MAX_PIECE_MISSES, `beside the seed: asked ${asked} times`);
    t.same([...f.counters.suspect], [], 'not suspect: a listing a step behind is no lie');
    t.ok((f.counters.fetchedFrom.get('seed') ?? 0) >= size, 'the big blob came from the seed');
    t.same(await treeOf(r.target), await treeOf(p.dir), 'the layout is the signed one');
  },
);
