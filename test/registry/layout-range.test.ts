// tier: unit
// layoutRange, the read-ahead stream every layout store serves from (serve DIR, the agent's
// staging): exact bytes for any range across its read units, the re-check holding back the
// whole chunk that no longer matches (and nothing before it), and the file closed however the
// stream ends, even with reads still in flight.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { layoutRange } from '@offline-bundle/registry';
import { tmpdir } from '../helpers/tmp.mjs';

const MiB = 1024 * 1024;
const data = randomBytes(5 * MiB + 12_345);
const chunkDigests = (b: Buffer) =>
  Array.from({ length: Math.ceil(b.length / MiB) }, (_, i) =>
    createHash('sha256')
      .update(b.subarray(i * MiB, (i + 1) * MiB))
      .digest(),
  );

/** Everything the stream passed on, and the error that ended it, if one did. */
async function drain(s: Readable): Promise<{ body: Buffer; err?: Error }> {
  const parts: Buffer[] = [];
  try {
    for await (const c of s) parts.push(c as Buffer);
    return { body: Buffer.concat(parts) };
  } catch (err) {
    return { body: Buffer.concat(parts), err: err as Error };
  }
}

let file: string;
t.before(async () => {
  file = join(await tmpdir(t), 'blob');
  await writeFile(file, data);
});

const ranges: [number, number][] = [
  [0, data.length],
  [1, 2],
  [MiB - 1, MiB + 1],
  [300_000, 3 * MiB + 7],
  [5 * MiB, data.length],
  [data.length - 1, data.length],
  [0, 0],
];
for (const checked of [false, true]) {
  t.test(
    `${checked ? 'checked' : 'unchecked'}: every range gives exactly its bytes, and the file is closed at the end`,
    async (t) => {
      for (const [start, end] of ranges) {
        const fh = await open(file);
        const { body, err } = await drain(
          layoutRange(
            fh,
            data.length,
            start,
            end,
            'blob',
            checked ? chunkDigests(data) : undefined,
          ),
        );
        t.error(err, `[${start}, ${end})`);
        t.ok(
          body.equals(data.subarray(start, end)),
          `[${start}, ${end}): ${body.length} bytes as on disk`,
        );
        t.equal(fh.fd, -1, 'closed');
      }
    },
  );
}

t.test(
  'checked: a chunk that no longer matches is not passed on, not one byte of it; the chunks before it are',
  async (t) => {
    const digests = chunkDigests(data);
    digests[3] = createHash('sha256').update('something else').digest();
    const fh = await open(file);
    const { body, err } = await drain(
      layoutRange(fh, data.length, 10, data.length, 'layout x: blob', digests),
    );
    t.match(
      err?.message,
      /layout x: blob changed on disk after it was checked \(bytes 3145728-4194303\)/,
    );
    t.ok(body.length <= 3 * MiB - 10, `stops before the changed chunk (${body.length} bytes sent)`);
    t.ok(body.equals(data.subarray(10, 10 + body.length)), "and what it sent is the file's bytes");
    t.equal(fh.fd, -1, 'closed');
    // a range inside an unchanged chunk is still served
    const again = await open(file);
    const ok = await drain(layoutRange(again, data.length, MiB + 5, 2 * MiB, 'blob', digests));
    t.ok(!ok.err && ok.body.equals(data.subarray(MiB + 5, 2 * MiB)));
  },
);

t.test(
  'a file shorter than its listed size ends the stream with an error, not a short answer',
  async (t) => {
    const fh = await open(file);
    const { body, err } = await drain(
      layoutRange(fh, data.length + MiB, 0, data.length + MiB, 'blob'),
    );
    t.match(err?.message, /shrank/);
    t.ok(body.length <= data.length && body.equals(data.subarray(0, body.length)));
    t.equal(fh.fd, -1, 'closed');
  },
);

t.test(
  'destroyed by its client after the first bytes, reads still in flight: the file is closed once they end',
  async (t) => {
    for (const checked of [false, true]) {
      const fh = await open(file);
      const s = layoutRange(
        fh,
        data.length,
        0,
        data.length,
        'blob',
        checked ? chunkDigests(data) : undefined,
      );
      await new Promise<void>((resolve) => s.once('data', () => resolve()));
      const closed = new Promise<void>((resolve) => s.once('close', () => resolve()));
      s.destroy();
      await closed;
      t.equal(fh.fd, -1, `${checked ? 'checked' : 'unchecked'}: closed`);
    }
  },
);
