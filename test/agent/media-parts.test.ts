// tier: unit
// The media watcher and a bundle split into parts: the set is one bundle (offered once, by its
// first part, with one identity over all parts); it is stable only when every part is (a part
// still growing holds the whole set back); a set with a part missing is offered, so that the
// load names the missing part on the status, and offered again once the set changes; a whole
// bundle beside its own parts is offered once, as the file; part files past the per-directory
// bound are not looked at.
import t from 'tap';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { MediaWatcher, createLogger, type FoundBundle } from '@offline-bundle/agent';
import { MAX_PARTS, partName } from '@offline-bundle/format';
import { makeBundle } from '../format/craft.js';
import { tmpdir } from '../helpers/tmp.mjs';

async function setup(t: any) {
  const root = await tmpdir(t);
  const drop = join(root, 'drop');
  await mkdir(drop);
  const lines: string[] = [];
  const log = createLogger(
    new Writable({
      write: (c, _e, cb) => {
        lines.push(String(c));
        cb();
      },
    }),
  );
  const w = new MediaWatcher({
    roots: [join(root, 'media')],
    watchDirs: [drop],
    pollSeconds: 3600,
    log,
    mountinfo: join(root, 'none'),
    quietSeconds: 0,
  });
  const found: FoundBundle[] = [];
  w.on('bundle', (b) => found.push(b));
  const bytes = await readFile((await makeBundle(t, { layerSizes: [40_000, 9_000] })).path);
  const size = 10_000;
  const count = Math.ceil(bytes.length / size);
  const names = Array.from({ length: count }, (_, i) => partName('s.bundle', i + 1, count));
  const put = (i: number) =>
    writeFile(join(drop, names[i]!), bytes.subarray(i * size, (i + 1) * size));
  return {
    drop,
    w,
    found,
    bytes,
    names,
    put,
    lines,
    scans: async (n: number) => {
      for (let i = 0; i < n; i++) await w.scan();
    },
  };
}

t.test(
  'a complete set: offered once, by its first part, after every part held still',
  async (t) => {
    const s = await setup(t);
    t.ok(s.names.length >= 4, `${s.names.length} parts`);
    for (let i = 0; i < s.names.length; i++) await s.put(i);
    await s.scans(2);
    // a part still being written: the set waits
    await writeFile(
      join(s.drop, s.names.at(-1)!),
      s.bytes.subarray((s.names.length - 1) * 10_000, s.bytes.length - 10),
    );
    await s.scans(2);
    t.same(s.found, [], 'not while a part changed within the last looks');
    await s.put(s.names.length - 1);
    await s.scans(3);
    t.same(
      s.found.map((f) => f.file),
      [join(s.drop, s.names[0]!)],
      'offered once, by its first part',
    );
    t.same(
      s.found[0]!.release,
      { version: '1.2.3', arch: 'amd64' },
      'its head read through the parts',
    );
    t.match(s.found[0]!.key, /^parts:/, 'one identity for the set');
    await s.scans(3);
    t.equal(s.found.length, 1, 'not again, and never per part');
  },
);

t.test(
  'a part missing: offered (the load names it), and again once the part is there',
  async (t) => {
    const s = await setup(t);
    for (let i = 0; i < s.names.length; i++) if (i !== 2) await s.put(i);
    await s.scans(3);
    t.equal(s.found.length, 1, 'the incomplete set is offered for the load to report');
    await s.scans(3);
    t.equal(s.found.length, 1, 'once');
    await s.put(2);
    await s.scans(3);
    t.equal(s.found.length, 2, 'the completed set is a new bundle');
    t.not(s.found[1]!.key, s.found[0]!.key);
  },
);

t.test('the bundle whole beside its own parts: offered once, as the file', async (t) => {
  const s = await setup(t);
  for (let i = 0; i < s.names.length; i++) await s.put(i);
  await writeFile(join(s.drop, 's.bundle'), s.bytes);
  await s.scans(3);
  t.same(
    s.found.map((f) => f.file),
    [join(s.drop, 's.bundle')],
  );
});

t.test(`at most ${MAX_PARTS} part files a directory are looked at`, async (t) => {
  const s = await setup(t);
  for (let i = 0; i < s.names.length; i++) await s.put(i);
  // a junk set sorted after the real one, its names past the bound
  for (let i = 1; i <= MAX_PARTS; i++)
    await writeFile(join(s.drop, partName('z.bundle', i, MAX_PARTS)), 'x');
  await s.scans(3);
  t.same(
    s.found.map((f) => f.file),
    [join(s.drop, s.names[0]!)],
    'the set within the bound is offered',
  );
  t.ok(
    s.w.work.stats < 3 * (s.names.length + 10),
    `stats over three polls: ${s.w.work.stats} (the junk set is not stat'd)`,
  );
  t.match(s.lines.join(''), /holds more part files than the 999 looked at: 999 are not/);
});

t.test(
  'a part that went away while the load read it is the media removed, as for the file',
  async (t) => {
    const { mediaGone } = await import('../../agent/dist/load/bundle-file.js');
    const s = await setup(t);
    const part = (i: number) => join(s.drop, s.names[i]!);
    // a system error as PartsSource passes it on: the part's path, code and syscall kept
    const eio = Object.assign(
      new Error(`EIO: i/o error, read (part 3 of ${s.names.length}, ${part(2)})`),
      { code: 'EIO', errno: -5, syscall: 'read', path: part(2) },
    );
    const gone = mediaGone(eio, part(0)) as { reason?: string; message: string };
    t.equal(gone.reason, 'MediaRemoved');
    t.match(gone.message, /was the USB stick removed/);
    // a FUSE stick (exFAT, fusefat) whose daemon died answers a read in flight with ECONNABORTED, later ones with ENOTCONN
    for (const code of ['ECONNABORTED', 'ENOTCONN']) {
      const fuse = Object.assign(new Error(`${code}: read`), {
        code,
        syscall: 'read',
        path: part(1),
      });
      t.equal(
        (mediaGone(fuse, part(0)) as { reason?: string }).reason,
        'MediaRemoved',
        `${code} from a FUSE stick is the media removed`,
      );
    }
    const other = Object.assign(new Error('EIO'), {
      code: 'EIO',
      syscall: 'read',
      path: join(s.drop, 'other.bundle.part-001-of-002'),
    });
    t.equal(
      mediaGone(other, part(0)),
      other,
      "a part of another bundle is not this bundle's media",
    );
  },
);
