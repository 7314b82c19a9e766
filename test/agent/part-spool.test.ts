// The part spool (agent/src/daemon/part-spool.ts) with real directories as the sticks: parts
// of one split bundle taken from sticks one after another add up to the bundle byte for byte;
// a stick whose parts cannot belong to the set held (another split, another bundle of the same
// name, a part cut short, no room) is refused in one line naming the part, and the spool is
// left empty; a copy that breaks off leaves no half-written part.
import t from 'tap';
import { access, mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '@offline-bundle/agent';
import {
  PartsSource,
  misplacedFrame,
  partName,
  verifyBundle,
  withBundle,
} from '@offline-bundle/format';
import { emptyStatus, StatusTracker, technicianLine } from '@offline-bundle/status';
import { makeBundle, tmpdir } from '../format/craft.js';

const { PartSpool } = await import('../../agent/dist/daemon/part-spool.js');
const { copyPart } = await import('../../agent/dist/daemon/part-spool-copy.js');
const { loadEndsSpool } = await import('../../agent/dist/daemon/part-spool.js');
const { lookAtPartSet } = await import('../../agent/dist/daemon/part-sets.js');

const SIZE = 10_000;

async function setup(
  t: any,
  opts: { reserve?: number; upgrade?: string; imageStore?: string } = {},
) {
  const root = await tmpdir(t, 'ob-spool-');
  const made = await makeBundle(t, { layerSizes: [25_000, 9_000] });
  const bytes = await readFile(made.path);
  const count = Math.ceil(bytes.length / SIZE);
  const lines: string[] = [];
  const log = createLogger(
    new Writable({
      write: (c, _e, cb) => {
        lines.push(String(c));
        cb();
      },
    }),
  );
  const spool = new PartSpool(
    opts.upgrade ?? join(root, 'upgrade'),
    opts.reserve ?? 0,
    log,
    opts.imageStore,
  );
  const tracker = new StatusTracker(emptyStatus('n'));
  let sticks = 0;
  /** A "stick": a directory holding the given parts (1-based), `edit` changing a part's bytes. */
  const stick = async (
    ns: number[],
    edit: (n: number, b: Buffer) => Buffer = (_n, b) => b,
    of = count,
  ) => {
    const dir = join(root, `stick-${++sticks}`);
    await mkdir(dir);
    const names: string[] = [];
    for (const n of ns) {
      const name = partName('u.bundle', n, of);
      await writeFile(
        join(dir, name),
        edit(n, Buffer.from(bytes.subarray((n - 1) * SIZE, n * SIZE))),
      );
      names.push(name);
    }
    return { dir, names, media: `USB stick S${sticks} (${dir})` };
  };
  const spoolFiles = async () => (await readdir(spool.dir).catch(() => [] as string[])).sort();
  return { root, made, bytes, count, spool, tracker, stick, lines, spoolFiles };
}

t.test(
  'two sticks one after another: the spool holds the bundle; the technician is told which part comes next',
  async (t) => {
    const s = await setup(t);
    t.ok(s.count >= 4, `${s.count} parts`);
    const first = await s.spool.collect(await s.stick([1, 2]), s.tracker);
    t.same(first, { complete: false, have: [1, 2], count: s.count });
    const line = technicianLine(s.tracker.current);
    t.equal(
      line,
      `Copied parts 1–2 of ${s.count} of u.bundle. You may remove this stick. Insert the stick with parts 3–${s.count} of ${s.count} of u.bundle.`,
    );
    t.equal(
      s.tracker.current.conditions.find((c) => c.type === 'MediaDetected')?.reason,
      'PartsWaiting',
    );
    // the second stick also holds part 2, the same bytes: taken as it is
    const rest = Array.from({ length: s.count - 2 }, (_, i) => i + 3);
    const second = await s.spool.collect(await s.stick([2, ...rest]), s.tracker);
    t.equal(second.complete, true);
    const source = await PartsSource.open(second.file);
    t.teardown(() => source.close());
    t.equal(source.size, s.bytes.length, 'the parts add up to the bundle');
    t.same(
      Buffer.concat(
        await Promise.all(
          (await s.spoolFiles())
            .filter((n) => n.includes('.part-'))
            .map((n) => readFile(join(s.spool.dir, n))),
        ),
      ),
      s.bytes,
      'byte for byte',
    );
    const verified = await verifyBundle(source, { trust: s.made.trust });
    t.equal(
      verified.manifest.release.version,
      s.made.written.manifest.release.version,
      'and verifies as the bundle',
    );
    t.notOk(
      (await s.spoolFiles()).some((n) => n.startsWith('.')),
      'no temporary file left',
    );
    await s.spool.clear();
    t.same(await s.spoolFiles(), [], 'cleared');
  },
);

t.test('parts before part 1: held by name and count until part 1 comes', async (t) => {
  const s = await setup(t);
  const a = await s.spool.collect(await s.stick([s.count]), s.tracker);
  t.same(a, { complete: false, have: [s.count], count: s.count });
  t.match(
    technicianLine(s.tracker.current),
    new RegExp(
      `^Copied part ${s.count} of ${s.count} of u\\.bundle\\. You may remove this stick\\. Insert the stick with parts 1–${s.count - 1} of ${s.count} of u\\.bundle\\.$`,
    ),
  );
  const b = await s.spool.collect(
    await s.stick(Array.from({ length: s.count - 1 }, (_, i) => i + 1)),
    s.tracker,
  );
  t.equal(b.complete, true);
});

const refusals: Array<
  [
    string,
    (
      s: Awaited<ReturnType<typeof setup>>,
    ) => Promise<{ dir: string; names: string[]; media: string }>,
    string,
    RegExp,
  ]
> = [
  [
    'the same part number with other bytes (another bundle of the same name)',
    (s) =>
      s.stick([2, 3], (n, b) =>
        n === 2 ? Buffer.from(b.map((x, i) => (i === 100 ? x ^ 0xff : x))) : b,
      ),
    'PartsMixed',
    /^part 2 of \d+ \(u\.bundle\.part-002-of-\d+\) is on this stick and was copied before from another stick, and the two differ \(other bytes\): .*the copied parts were dropped/,
  ],
  [
    'a part of another split (another count)',
    (s) => s.stick([3], undefined, s.count + 1),
    'PartsMixed',
    /^u\.bundle\.part-003-of-\d+ on this stick says u\.bundle has \d+ parts, the parts 1–2 copied before say \d+: they are of two different splits/,
  ],
  [
    'a part cut short (not the last)',
    (s) => s.stick([3], (_n, b) => b.subarray(0, 4000)),
    'PartCutShort',
    /^part 3 of \d+ \(u\.bundle\.part-003-of-\d+, this stick\) is 4000 bytes, the other parts 10000: it was cut short; copy it again/,
  ],
  [
    'a part longer than the others',
    (s) => s.stick([3], (_n, b) => Buffer.concat([b, Buffer.alloc(10)])),
    'PartsMixed',
    /^part 3 of \d+ \(u\.bundle\.part-003-of-\d+, this stick\) is 10010 bytes, longer than the 10000 of the other parts/,
  ],
];

for (const [what, second, reason, message] of refusals) {
  t.test(`refused: ${what}; the spool is left empty`, async (t) => {
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    t.same(
      (await s.spoolFiles()).filter((n) => n.includes('.part-')).length,
      2,
      'parts 1 and 2 held',
    );
    const err = await s.spool.collect(await second(s), s.tracker).then(
      () => undefined,
      (e: any) => e,
    );
    t.ok(err, 'refused');
    t.equal(err?.reason, reason);
    t.match(err?.message, message);
    t.notMatch(err?.message, /\n/, 'one line');
    t.same(await s.spoolFiles(), [], 'nothing of the set left in the spool');
  });
}

t.test('part 1 of another bundle of the same name: told apart by its head', async (t) => {
  const s = await setup(t);
  await s.spool.collect(await s.stick([1, 2]), s.tracker);
  const other = await makeBundle(t, { layerSizes: [25_000, 9_000] });
  const otherBytes = await readFile(other.path);
  const dir = join(s.root, 'other-stick');
  await mkdir(dir);
  const name = partName('u.bundle', 1, s.count);
  await writeFile(join(dir, name), otherBytes.subarray(0, SIZE));
  const err = await s.spool
    .collect({ dir, names: [name], media: 'USB stick OTHER' }, s.tracker)
    .then(
      () => undefined,
      (e: any) => e,
    );
  t.equal(err?.reason, 'PartsMixed', err?.message);
  t.match(
    err?.message,
    /^part 1 of \d+ \(u\.bundle\.part-001-of-\d+\) is on this stick and was copied before from another stick, and the two differ/,
  );
  t.same(await s.spoolFiles(), []);
});

t.test(
  'no room for the bundle plus the reserve: refused with the numbers, nothing copied',
  async (t) => {
    const s = await setup(t, { reserve: 2 ** 50 });
    const err = await s.spool.collect(await s.stick([1, 2]), s.tracker).then(
      () => undefined,
      (e: any) => e,
    );
    t.equal(err?.reason, 'InsufficientSpace');
    t.match(
      err?.message,
      /^not enough disk space to collect the \d+ parts of u\.bundle: they need about [\d.]+ [kKMG]?B \([\d.]+ [kKMG]?B still to copy\) plus a [\d.]+ [A-Z]+ reserve in \S+parts-spool, which has [\d.]+ [A-Z]+ free; free [\d.]+ [A-Z]+ and plug the stick in again$/,
    );
    t.same(await s.spoolFiles(), []);
  },
);

t.test(
  "another bundle's parts while one is collected: the newest stick wins, the old parts are dropped",
  async (t) => {
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    const dir = join(s.root, 'v-stick');
    await mkdir(dir);
    const name = partName('v.bundle', 1, s.count);
    await writeFile(join(dir, name), s.bytes.subarray(0, SIZE));
    const r = await s.spool.collect({ dir, names: [name], media: 'USB stick V' }, s.tracker);
    t.same(r, { complete: false, have: [1], count: s.count });
    t.same(
      (await s.spoolFiles()).filter((n) => n.includes('.part-')),
      [name],
      "only the new bundle's part",
    );
    t.match(
      s.lines.join(''),
      /the parts 1–2 of \d+ of u\.bundle copied before are dropped \(one bundle is collected at a time\)/,
    );
  },
);

t.test(
  'a part that ends early while copied (the stick pulled): MediaRemoved, no temporary file, the parts held kept',
  async (t) => {
    const s = await setup(t);
    await s.spool.collect(await s.stick([1]), s.tracker);
    const st = await s.stick([2]);
    const dest = join(s.spool.dir, partName('u.bundle', 2, s.count));
    // the size seen when the stick was looked at, larger than what can now be read
    const err = await copyPart(
      { src: join(st.dir, st.names[0]!), size: SIZE + 5000, label: `part 2 of ${s.count}` },
      dest,
    ).then(
      () => undefined,
      (e: any) => e,
    );
    t.equal(err?.reason, 'MediaRemoved');
    t.match(
      err?.message,
      /could not be read to the end \(10000 bytes read of 15000\) while part 2 of \d+ was copied: was the USB stick removed\? Plug it in again/,
    );
    t.same(
      (await s.spoolFiles()).filter((n) => n.includes('.part-')),
      [partName('u.bundle', 1, s.count)],
      'part 1 kept, part 2 not there, whole or half',
    );
    t.notOk(
      (await s.spoolFiles()).some((n) => n.startsWith('.')),
      'no temporary file',
    );
  },
);

t.test('a restart: a half-copied part goes, the parts held are said again', async (t) => {
  const s = await setup(t);
  await s.spool.collect(await s.stick([1, 2]), s.tracker);
  await writeFile(join(s.spool.dir, `.${partName('u.bundle', 3, s.count)}.copying`), 'half');
  const tracker = new StatusTracker(emptyStatus('n'));
  t.equal(await s.spool.startUp(tracker), undefined, 'not whole: nothing to load');
  t.notOk(
    (await s.spoolFiles()).some((n) => n.startsWith('.')),
    'the half-copied part removed',
  );
  t.match(
    technicianLine(tracker.current),
    new RegExp(
      `^Copied parts 1–2 of ${s.count} of u\\.bundle\\. You may remove this stick\\. Insert the stick with parts 3–${s.count}`,
    ),
  );
  await s.spool.collect(
    await s.stick(Array.from({ length: s.count - 2 }, (_, i) => i + 3)),
    s.tracker,
  );
  const whole = await s.spool.startUp(new StatusTracker(emptyStatus('n')));
  t.equal(
    whole,
    join(s.spool.dir, partName('u.bundle', 1, s.count)),
    'a whole spool is offered for its load',
  );
  await access(whole!);
});

t.test(
  'while copying: the technician line says which part and not to remove the stick',
  async (t) => {
    const { showCopying } = await import('../../agent/dist/daemon/part-spool-status.js');
    const tracker = new StatusTracker(emptyStatus('n'));
    showCopying(
      tracker,
      { file: '/media/usb/u.bundle', media: 'USB stick S' },
      2,
      5,
      { done: 0, total: 10 },
      'u.bundle',
    );
    t.equal(
      technicianLine(tracker.current),
      'Copying part 2 of 5 of u.bundle — do not remove this stick yet.',
    );
    t.equal(tracker.current.phase, 'Staging');
  },
);

t.test('a set saying more than 999 parts is refused before a byte is copied', async (t) => {
  const s = await setup(t);
  const dir = join(s.root, 'big-stick');
  await mkdir(dir);
  const name = partName('u.bundle', 1, 1000);
  await writeFile(join(dir, name), s.bytes.subarray(0, SIZE));
  const err = await s.spool.collect({ dir, names: [name], media: 'USB stick BIG' }, s.tracker).then(
    () => undefined,
    (e: any) => e,
  );
  t.equal(err?.reason, 'PartsIncomplete');
  t.match(
    err?.message,
    /says u\.bundle has 1000 parts, more than the 999 a bundle may be split into/,
  );
  t.same(await s.spoolFiles(), []);
});

t.test(
  'the media watcher: on a stick, a set with parts missing is offered as partial, its head unread',
  async (t) => {
    const { MediaWatcher } = await import('@offline-bundle/agent');
    const s = await setup(t);
    const media = join(s.root, 'media');
    const usb = join(media, 'usb');
    await mkdir(usb, { recursive: true });
    const mountinfo = join(s.root, 'mountinfo');
    await writeFile(mountinfo, `36 35 7:0 / ${usb} rw,relatime shared:1 - ext4 /dev/loop0 rw\n`);
    const log = createLogger(new Writable({ write: (_c, _e, cb) => cb() }));
    const w = new MediaWatcher({
      roots: [media],
      watchDirs: [],
      pollSeconds: 3600,
      log,
      mountinfo,
      quietSeconds: 0,
    });
    const found: any[] = [];
    w.on('bundle', (b) => found.push(b));
    const names = [2, 3].map((n) => partName('u.bundle', n, s.count));
    for (const [i, n] of [2, 3].entries())
      await writeFile(join(usb, names[i]!), s.bytes.subarray((n - 1) * SIZE, n * SIZE));
    for (let i = 0; i < 3; i++) await w.scan();
    t.equal(found.length, 1, 'offered once');
    t.same(found[0].partial, { dir: usb, names }, 'as partial, with its part names');
    t.equal(w.work.heads, 0, 'no head read (part 1 is on another stick)');
  },
);

t.test(
  'the other parts of another bundle of the same name and split size: named once the set is whole, and the spool emptied',
  async (t) => {
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    // another bundle, laid out otherwise (other layer sizes, a head of another length), in as
    // many parts of the same size. Two bundles can still line up by chance: every frame the
    // other's seek table puts in parts 1-2 on one of this bundle's (the random digests sort the
    // blobs; it happened in two rehearsals), and then the spool passes the set and only the
    // load's digests refuse it. This case is about the spool's refusal, so it takes the first
    // of a few such bundles whose mixed set the same frame check (misplacedFrame) finds out.
    let otherBytes = Buffer.alloc(0);
    for (let i = 1; i <= 10; i++) {
      const other = await makeBundle(t, {
        layerSizes: [24_300, 9_000],
        createdAt: `2026-01-02T03:04:05.${String(i).padStart(9, '0')}Z`,
      });
      otherBytes = await readFile(other.path);
      const mixed = join(s.root, `mixed-${i}.bundle`);
      await writeFile(
        mixed,
        Buffer.concat([s.bytes.subarray(0, 2 * SIZE), otherBytes.subarray(2 * SIZE)]),
      );
      const bad = await withBundle(mixed, misplacedFrame).catch(() => undefined);
      if (bad !== undefined) break;
    }
    t.equal(Math.ceil(otherBytes.length / SIZE), s.count, 'as many parts');
    const dir = join(s.root, 'other-rest');
    await mkdir(dir);
    const names: string[] = [];
    for (let n = 3; n <= s.count; n++) {
      names.push(partName('u.bundle', n, s.count));
      await writeFile(join(dir, names.at(-1)!), otherBytes.subarray((n - 1) * SIZE, n * SIZE));
    }
    const err = await s.spool.collect({ dir, names, media: 'USB stick OTHER' }, s.tracker).then(
      () => undefined,
      (e: any) => e,
    );
    t.equal(err?.reason, 'PartsMixed', err?.message);
    t.match(
      err?.message,
      new RegExp(
        `^part \\d of ${s.count} of u\\.bundle does not fit the others \\(no zstd frame at byte \\d+ of the bundle, where the seek table says one starts\\): one of it and part ${s.count} \\(whose end lists the bundle's frames\\) is from another bundle of the same name`,
      ),
    );
    t.same(await s.spoolFiles(), [], 'nothing left');
  },
);

t.test(
  'a refusal on the status: Failed with the reason, the technician told what to do',
  async (t) => {
    const { showRefusal } = await import('../../agent/dist/daemon/part-spool-status.js');
    const { AgentError } = await import('@offline-bundle/agent');
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    const err = await s.spool.collect(await s.stick([3], undefined, s.count + 1), s.tracker).then(
      () => undefined,
      (e: any) => e,
    );
    t.ok(err instanceof AgentError);
    showRefusal(
      s.tracker,
      createLogger(new Writable({ write: (_c, _e, cb) => cb() })),
      { file: '/media/usb/u.bundle.part-003-of-009', media: 'USB stick S2' },
      err,
    );
    const st = s.tracker.current;
    t.equal(st.phase, 'Failed');
    t.match(
      st.conditions.find((c) => c.type === 'Failed'),
      { reason: 'PartsMixed', message: err.message },
    );
    t.equal(
      st.message,
      'Failed: A part on this USB stick is from another update than the parts copied before, which were dropped. Plug in the sticks of one update only, one after another.',
    );
  },
);

const rest = (from: number, count: number) =>
  Array.from({ length: count - from + 1 }, (_, i) => i + from);
const refusal = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: any) => e,
  );

t.test(
  'a load of the spool stopped (SIGTERM) or failing to read the disk keeps the parts; a verdict ends them; a restart offers them',
  async (t) => {
    const { AgentError } = await import('@offline-bundle/agent');
    const s = await setup(t);
    await s.spool.collect(await s.stick(rest(1, s.count)), s.tracker);
    const stopped = new AgentError('Interrupted', 'the agent stopped');
    t.equal(loadEndsSpool(stopped, true), false, 'stopped mid-load: kept');
    t.equal(
      loadEndsSpool(Object.assign(new Error('aborted'), { name: 'AbortError' }), false),
      false,
      'an abort: kept',
    );
    t.equal(
      loadEndsSpool(Object.assign(new Error('EIO'), { code: 'IO_ERROR' }), false),
      false,
      'the disk failing under the read: kept',
    );
    t.equal(
      loadEndsSpool(new AgentError('Busy', 'another load'), false),
      false,
      'tried again later: kept',
    );
    t.equal(loadEndsSpool(new AgentError('BadSignature', 'bad'), false), true, 'refused: ended');
    t.equal(loadEndsSpool(undefined, false), true, 'loaded: ended');
    const again = await new PartSpool(
      s.spool.dir.replace(/\/parts-spool$/, ''),
      0,
      createLogger(new Writable({ write: (_c, _e, cb) => cb() })),
    ).startUp(new StatusTracker(emptyStatus('n')));
    t.equal(
      again,
      join(s.spool.dir, partName('u.bundle', 1, s.count)),
      'the restart offers the spool whole',
    );
  },
);

t.test(
  'a part held already, read again from the new stick: "Checking part N" shown, never "You may remove this stick" meanwhile',
  async (t) => {
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    const seen: string[] = [];
    s.tracker.onChange((st) => seen.push(technicianLine(st)));
    const r = await s.spool.collect(await s.stick([2, 3]), s.tracker);
    t.same(r, { complete: false, have: [1, 2, 3], count: s.count });
    const first = seen.findIndex((l) => l.startsWith('Checking'));
    t.equal(
      seen[first],
      `Checking part 2 of ${s.count} of u.bundle — do not remove this stick yet.`,
    );
    t.notOk(
      seen.slice(0, -1).some((l) => /You may remove/.test(l)),
      `no "may remove" before the copy ended: ${JSON.stringify(seen)}`,
    );
    t.equal(s.tracker.current.phase, 'Idle');
  },
);

t.test(
  "no room for the parts and the images when the image store shares the spool's filesystem (a private tmpfs): refused with the numbers",
  { skip: process.getuid?.() !== 0 && 'needs root to mount a tmpfs' },
  async (t) => {
    const { filesystemFree } = await import('@offline-bundle/host');
    const base = await tmpdir(t, 'ob-spool-fs-');
    const fs = join(base, 'fs');
    await mkdir(fs);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m', 'tmpfs', fs]);
    t.teardown(() => {
      try {
        execFileSync('umount', [fs]);
      } catch {
        /* gone */
      }
    });
    const probe = await setup(t);
    const images = probe.made.written.manifest.totals.imageStoreBytes;
    t.ok(images > 0, `${images} bytes of images`);
    const free = (await filesystemFree(fs)).free;
    // room for the parts and the reserve, not for the images too
    // (parts 1 and 2 alone: the bundle is counted as split size × count)
    const reserve = free - SIZE * probe.count - Math.floor(images / 2);
    await mkdir(join(fs, 'store'));
    const s = await setup(t, {
      upgrade: join(fs, 'upgrade'),
      reserve,
      imageStore: join(fs, 'store'),
    });
    const err = await refusal(s.spool.collect(await s.stick([1, 2]), s.tracker));
    t.equal(err?.reason, 'InsufficientSpace', err?.message);
    t.match(
      err?.message,
      /^not enough disk space to collect the \d+ parts of u\.bundle: they need about [\d.]+ [kKMG]?B \([\d.]+ [kKMG]?B still to copy\) plus [\d.]+ [kKMG]?B for the update's images in \S+store on the same disk, plus a [\d.]+ [kKMG]?B reserve in \S+parts-spool, which has [\d.]+ [kKMG]?B free; free [\d.]+ [kKMG]?B and plug the stick in again$/,
    );
    t.same(await s.spoolFiles(), []);
    // the image store on another filesystem: the parts alone fit
    const other = new PartSpool(
      join(fs, 'upgrade'),
      reserve,
      createLogger(new Writable({ write: (_c, _e, cb) => cb() })),
      base,
    );
    t.same(await other.collect(await s.stick([1, 2]), s.tracker), {
      complete: false,
      have: [1, 2],
      count: s.count,
    });
  },
);

t.test('a restart after Ready keeps Ready: the parts held are said beside it', async (t) => {
  const s = await setup(t);
  await s.spool.collect(await s.stick([1, 2]), s.tracker);
  const ready = {
    ...emptyStatus('n'),
    phase: 'Ready' as const,
    bundle: { file: '/media/usb/y.bundle', media: 'USB stick Y', version: '9.9.9' },
    conditions: [
      {
        type: 'Ready',
        status: 'True' as const,
        reason: 'Loaded',
        message: 'update 9.9.9 loaded',
        lastTransitionTime: new Date().toISOString(),
      },
    ],
  };
  const tracker = new StatusTracker(ready);
  t.equal(await s.spool.startUp(tracker), undefined);
  t.equal(tracker.current.phase, 'Ready', 'not demoted to Idle');
  t.match(
    tracker.current.conditions.find((c) => c.type === 'Ready'),
    { status: 'True', reason: 'Loaded' },
  );
  t.match(
    tracker.current.conditions.find((c) => c.type === 'MediaDetected'),
    { reason: 'PartsWaiting', message: /^Copied parts 1–2 of \d+ of u\.bundle\./ },
  );
  t.match(technicianLine(tracker.current), /^Done: update 9\.9\.9 is loaded on this node\./);
});

t.test(
  'a restart after a copy cut short (Failed: Interrupted) says which stick to bring, not the stop',
  async (t) => {
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    const stopped = {
      ...emptyStatus('n'),
      phase: 'Failed' as const,
      bundle: { file: '/media/usb/u.bundle.part-002-of-003', media: 'USB stick U' },
      conditions: [
        {
          type: 'Failed',
          status: 'True' as const,
          reason: 'Interrupted',
          message: 'stopped',
          lastTransitionTime: new Date().toISOString(),
        },
      ],
    };
    const tracker = new StatusTracker(stopped);
    t.equal(await s.spool.startUp(tracker), undefined);
    t.equal(tracker.current.phase, 'Idle', 'the stop was not a verdict on the update');
    t.match(
      technicianLine(tracker.current),
      /^Copied parts 1–2 of \d+ of u\.bundle\. You may remove this stick\. Insert the stick with/,
    );
  },
);

t.test('a stray part file of another name never drops the parts held', async (t) => {
  const s = await setup(t);
  await s.spool.collect(await s.stick([1, 2]), s.tracker);
  const held = (await s.spoolFiles()).filter((n) => n.includes('.part-'));
  // a stick with the next parts and a leftover part of an old bundle
  const b = await s.stick(rest(3, s.count - 1));
  await writeFile(join(b.dir, partName('old.bundle', 2, 3)), Buffer.alloc(4096, 2));
  const stray = await s.spool.collect(
    { dir: b.dir, names: [partName('old.bundle', 2, 3)], media: b.media },
    s.tracker,
  );
  t.same(
    stray,
    { complete: false, have: [1, 2], count: s.count },
    'ignored beside the parts of the bundle held',
  );
  t.same(
    (await s.spoolFiles()).filter((n) => n.includes('.part-')),
    held,
    'kept',
  );
  const r = await s.spool.collect(b, s.tracker);
  t.same(r, { complete: false, have: rest(1, s.count - 1), count: s.count });
  t.equal(
    technicianLine(s.tracker.current),
    `Copied parts 1–${s.count - 1} of ${s.count} of u.bundle. You may remove this stick. Insert the stick with part ${s.count} of ${s.count} of u.bundle.`,
  );
  // a stick with only a leftover (no part 1 whose head reads): refused, the parts held kept
  const d = join(s.root, 'leftover');
  await mkdir(d);
  await writeFile(join(d, partName('old.bundle', 2, 3)), Buffer.alloc(4096, 2));
  const err = await refusal(
    s.spool.collect(
      { dir: d, names: [partName('old.bundle', 2, 3)], media: 'USB stick OLD' },
      s.tracker,
    ),
  );
  t.equal(err?.reason, 'PartsOtherBundle');
  t.equal(
    err?.message,
    `USB stick OLD holds part 2 of 3 of old.bundle, not of u.bundle, whose parts 1–${s.count - 1} of ${s.count} of u.bundle are held: nothing was copied, the parts held are kept; plug in the stick with parts ${s.count} of ${s.count} of u.bundle (to collect old.bundle instead, start with the stick holding its part 1)`,
  );
  t.equal((await s.spoolFiles()).filter((n) => n.includes('.part-')).length, s.count - 1, 'kept');
});

t.test(
  'spool.json over its bound, or missing beside parts: the spool is emptied, no part left orphaned',
  async (t) => {
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    await writeFile(join(s.spool.dir, 'spool.json'), Buffer.alloc(1024 + 1024 * 999 + 1, 0x20));
    t.equal(await s.spool.index(), undefined);
    t.same(await s.spoolFiles(), [], 'emptied');
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    const { rm } = await import('node:fs/promises');
    await rm(join(s.spool.dir, 'spool.json'));
    t.equal(await s.spool.index(), undefined);
    t.same(await s.spoolFiles(), [], 'emptied');
  },
);

t.test(
  'part names over 200 bytes or with control characters: refused in one line, by the spool and the watcher; the parts held kept',
  async (t) => {
    const { MediaWatcher } = await import('@offline-bundle/agent');
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    for (const base of ['\u0001'.repeat(20) + '.bundle', 'x'.repeat(190) + '.bundle']) {
      const d = join(s.root, `bad-${base.length}`);
      await mkdir(d);
      const name = partName(base, 3, s.count);
      await writeFile(join(d, name), s.bytes.subarray(2 * SIZE, 3 * SIZE));
      const err = await refusal(
        s.spool.collect({ dir: d, names: [name], media: 'USB stick BAD' }, s.tracker),
      );
      t.equal(err?.reason, 'PartsIncomplete');
      t.match(
        err?.message,
        /on USB stick BAD is refused: its name (is \d+ bytes, more than the 200|holds control characters)/,
      );
      t.notMatch(err?.message, /[\n\u0001]/, 'one line, no control character');
    }
    t.equal((await s.spoolFiles()).filter((n) => n.includes('.part-')).length, 2, 'kept');
    const media = join(s.root, 'media');
    const usb = join(media, 'usb');
    await mkdir(usb, { recursive: true });
    const mountinfo = join(s.root, 'mountinfo');
    await writeFile(mountinfo, `36 35 7:0 / ${usb} rw,relatime shared:1 - ext4 /dev/loop0 rw\n`);
    const lines: string[] = [];
    const w = new MediaWatcher({
      roots: [media],
      watchDirs: [],
      pollSeconds: 3600,
      log: createLogger(
        new Writable({
          write: (c, _e, cb) => {
            lines.push(String(c));
            cb();
          },
        }),
      ),
      mountinfo,
      quietSeconds: 0,
    });
    const found: any[] = [];
    w.on('bundle', (b) => found.push(b));
    await writeFile(join(usb, partName('\u0001.bundle', 1, 2)), 'x');
    for (let i = 0; i < 3; i++) await w.scan();
    t.equal(found.length, 0, 'not offered');
    t.equal(
      lines.filter((l) => /part file\(s\) ignored, e\.g\. .*holds control characters/.test(l))
        .length,
      1,
      'said once',
    );
  },
);

t.test(
  'a part whose temporary name is too long for the filesystem: StagingFailed in one line, not a raw ENAMETOOLONG',
  async (t) => {
    const s = await setup(t);
    const st = await s.stick([1]);
    await mkdir(s.spool.dir, { recursive: true });
    const err = await refusal(
      copyPart(
        { src: join(st.dir, st.names[0]!), size: SIZE, label: 'part 1 of 3' },
        join(s.spool.dir, 'y'.repeat(250)),
      ),
    );
    t.equal(err?.reason, 'StagingFailed', err?.message);
    t.match(
      err?.message,
      /^cannot create \S+ to copy part 1 of 3 into: the name is too long for this node's filesystem: rename the bundle to a shorter name, split it again, then plug the stick in again$/,
    );
  },
);

t.test(
  'a symbolic link as a part: refused by name as not a regular file (not taken for a pulled stick); the parts held kept',
  async (t) => {
    const s = await setup(t);
    await s.spool.collect(await s.stick([1, 2]), s.tracker);
    const d = join(s.root, 'link-stick');
    await mkdir(d);
    await writeFile(join(s.root, 'secret'), s.bytes.subarray(2 * SIZE, 3 * SIZE));
    const name = partName('u.bundle', 3, s.count);
    await symlink(join(s.root, 'secret'), join(d, name));
    const err = await refusal(
      s.spool.collect({ dir: d, names: [name], media: 'USB stick L' }, s.tracker),
    );
    t.equal(err?.reason, 'Corrupt', err?.message);
    t.equal(
      err?.message,
      `${join(d, name)} is not a regular file (a symbolic link or a special file): nothing was copied; copy the part itself onto the stick and plug it in again`,
    );
    t.equal((await s.spoolFiles()).filter((n) => n.includes('.part-')).length, 2, 'kept');
    t.same(
      await lookAtPartSet(d, [name], () => undefined),
      { notRegular: name },
      "the watcher's look names it too",
    );
  },
);

t.test(
  'a load from the spool: the technician may remove the USB stick, whatever the mode',
  async (t) => {
    const s = await setup(t);
    const at = (phase: string, mode: string) =>
      technicianLine({
        ...emptyStatus('n'),
        phase,
        bundle: {
          file: join(s.spool.dir, 'u.bundle.part-001-of-003'),
          media: s.spool.media(),
          mode,
        },
        progress: { bytesDone: 1, bytesTotal: 2, imagesDone: 1, imagesTotal: 2 },
      } as any);
    t.match(at('Serving', 'media'), /You may remove the USB stick\.$/);
    t.notMatch(at('Verifying', 'media'), /Do not remove/);
    t.match(
      at('Serving', 'media').replace(
        /.*/,
        technicianLine({
          ...emptyStatus('n'),
          phase: 'Serving',
          bundle: { file: '/media/usb/u.bundle', media: 'USB stick S', mode: 'media' },
        } as any),
      ),
      /Do not remove the USB stick\.$/,
      'from a stick: kept in',
    );
  },
);
