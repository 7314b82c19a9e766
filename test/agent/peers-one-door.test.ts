// One door for a staging's bytes (issue #41 item 1): a blob a peer sends goes to disk through
// format's staged-layout writer (EntryFiles), the writer a stick's extraction uses. So a peer's
// wrong bytes are refused by that writer exactly as a stick's damaged blob is (same code, same
// words: the refusal is the cause of the fetch's PeersSuspect), and neither leaves a temp file
// or anything under the blob's name. Real mutual-TLS peer server on 127.0.0.x.
import t from 'tap';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import type { AgentError } from '@offline-bundle/agent';
import {
  FormatError,
  WRITING_SUFFIX,
  blobPath,
  extractBundle,
  withBundleFile,
} from '@offline-bundle/format';
import { craft, readEntries, withData, entryNamed } from '../format/craft.js';
import { FixedDirectory, MiB, altered, endpoint, peerWorld } from './peers-setup.js';

const w = await peerWorld(t, [1 * MiB, 512 * 1024]);
const layer = w.manifest.blobs.reduce((a, b) => (b.size > a.size ? b : a));
const name = blobPath(layer.digest);
/** The layer's bytes as both origins get them wrong: zeros, chunk by chunk, so the digest is the same whatever the chunking. */
const zeros = () =>
  new Transform({ transform: (c: Buffer, _e, cb) => cb(null, Buffer.alloc(c.length)) });

/** Every file under `dir`, relative. */
async function files(dir: string): Promise<string[]> {
  return (await readdir(dir, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
    .sort();
}

t.test(
  "a peer's wrong blob is refused by the stick's writer, as the stick's own: same code and words, no temp file",
  async (t) => {
    // the stick: the bundle with that layer's bytes zeroed
    const entries = await readEntries(w.b.path);
    const bad = join(w.b.dir, 'zeroed.bundle');
    await craft(
      bad,
      entries.map((e) =>
        e.header.name === name ? withData(entryNamed(entries, name), Buffer.alloc(layer.size)) : e,
      ),
    );
    const stickTarget = join(w.b.dir, 'stick', '1.2.3-amd64');
    const stick = (await withBundleFile(bad, (s) =>
      extractBundle(s, stickTarget, { trust: w.b.trust, fsync: false }),
    ).catch((e: unknown) => e)) as FormatError;
    t.equal(stick.code, 'BLOB_DIGEST_MISMATCH', stick.message);
    await t.rejects(
      readdir(`${stickTarget}.partial`),
      { code: 'ENOENT' },
      "the stick's bad blob leaves no staging",
    );

    // the peer: every blob right but that one, which comes as zeros
    const liar = await w.server({
      offer: altered(w.served, (d, data) => (d === layer.digest ? data.pipe(zeros()) : data)),
    });
    const up = join(w.b.dir, 'peer', 'upgrade');
    const { result, counters } = w.fetch(
      up,
      new FixedDirectory([w.approval], [endpoint('liar', liar.url)]),
    );
    const err = await result.then(
      () => undefined,
      (e: AgentError) => e,
    );
    t.equal(err?.reason, 'PeersSuspect', err?.message);
    t.ok(counters.suspect.has('liar'));
    const refusal = err?.cause as FormatError | undefined;
    t.ok(refusal instanceof FormatError, "the fetch ends with the writer's refusal as its cause");
    t.equal(refusal?.code, stick.code, `the same code as the stick's (${stick.code})`);
    t.equal(refusal?.message, stick.message, "the same words as the stick's");
    // a fetch cut short keeps its verified blobs for the next try; the refused one is not among them
    const left = await files(join(up, '1.2.3-amd64.partial'));
    t.notOk(
      left.some((f) => f.endsWith(WRITING_SUFFIX)),
      `no temp file: ${left.join(', ')}`,
    );
    t.notOk(left.includes(name), "nothing under the refused blob's name");
    t.ok(
      left.length > 0,
      "the blobs that verified are kept, as a stick's staging cut short keeps them",
    );
  },
);
