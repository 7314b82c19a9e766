// A bundle split into parts (for a FAT32 stick) loads as one bundle, with a real containerd:
// the daemon finds the parts on a loop-mounted ext4 stick and loads the set once; a set with a
// part missing is not loaded: its parts are copied into the part spool and the status names the
// part to bring ("Insert the stick with part 2 of N"); once the part is on the stick the whole
// set loads from it, and the spool is emptied; `bundle-agent load PART` loads a split bundle by hand.
// (Parts on two sticks plugged one after another: parts-sticks.test.ts.)
import t from 'tap';
import { copyFile, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AGENT, BUNDLE, containerdNode, makeBundle, run, stick, daemonChild } from './fixtures.js';

const count = (log: string, re: RegExp) => (log.match(re) ?? []).length;
const PART = '1500';

/** `bundle split FILE` into `out`: the part names, in order. */
async function split(file: string, out: string): Promise<string[]> {
  await mkdir(out, { recursive: true });
  const r = await run(BUNDLE, ['split', file, '--size', PART, '--out', out]);
  if (r.code !== 0) throw new Error(r.stderr);
  return (await readdir(out)).filter((n) => n.includes('.part-')).sort();
}

t.test('a split bundle on a stick: the missing part named, then loaded once', async (t) => {
  const { dir, keys, root, config } = await containerdNode(t, 'ob-agent-parts-');
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const usb = join(root, 'media/usb');
  const kind = await stick(dir, usb, 64, t);
  t.equal(kind, 'loop', 'the stick is a loop-mounted ext4 filesystem');
  const file = await makeBundle(dir, {
    key: keys.key,
    version: '1.1.0',
    images: [{ name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1 '.repeat(2000) } }],
    upgradeFrom: ['1.0.0'],
    out: join(dir, 'update.bundle'),
  });
  const parts = await split(file, join(dir, 'parts'));
  t.ok(parts.length >= 3, `${parts.length} parts`);
  for (const p of parts.filter((_, i) => i !== 1))
    await copyFile(join(dir, 'parts', p), join(usb, p));

  const { out, until, stop } = daemonChild(t, config, statusFile);

  const waiting = await until('the missing part is named', (s) =>
    /^Copied parts/.test(s?.message ?? ''),
  );
  t.equal(
    waiting.message,
    `Copied parts 1, 3–${parts.length} of ${parts.length} of update.bundle. You may remove this stick. Insert the stick with part 2 of ${parts.length} of update.bundle.`,
    "the technician's line names the part",
  );
  t.match(
    waiting.conditions.find((c: any) => c.type === 'MediaDetected'),
    { reason: 'PartsWaiting' },
  );
  t.equal(count(out.log, /event=ready/g), 0, 'nothing loaded');
  const spool = join(root, 'var/lib/upgrade/parts-spool'); // paths.upgradeDir's default, under the node root
  t.equal(
    (await readdir(spool)).filter((n) => n.includes('.part-')).length,
    parts.length - 1,
    'the parts present are held',
  );

  await copyFile(join(dir, 'parts', parts[1]!), join(usb, parts[1]!));
  await until('the complete set is loaded', (s) => s?.phase === 'Ready');
  // a poll or two more: a set offered per part would be loaded again by now
  await sleep(3000);
  t.equal(count(out.log, /event=ready/g), 1, 'one load, not one per part');
  t.equal(
    count(out.log, /bundle found: /g),
    1,
    `one attempt: the complete set (${(out.log.match(/bundle found: \S+/g) ?? []).join(', ')})`,
  );
  t.match(
    out.log,
    /bundle found: \S*media\/usb\/\S*part-001/,
    'loaded from the stick, by its first part',
  );
  t.same(
    await readdir(spool).catch(() => []),
    [],
    'the spool of the same bundle is emptied: the stick had it all',
  );
  const listed = JSON.parse(
    (await run(AGENT, ['releases', 'list', '--json', '--config', config])).stdout,
  );
  t.match(
    listed.releases.find((r: any) => r.version === '1.1.0'),
    { images: 1, imagesPresent: 1 },
    'its image is in containerd',
  );

  await stop();

  await t.test(
    'bundle-agent load PART loads a split bundle; an incomplete set is a one-line usage error',
    async (t) => {
      await writeFile(
        config,
        (await readFile(config, 'utf8')).replace(/current: "[^"]*"/, 'current: "1.1.0"'),
      );
      const v2 = await makeBundle(dir, {
        key: keys.key,
        version: '1.2.0',
        images: [{ name: 'quay.io/acme/app:v2', files: { 'app.txt': 'app v2 '.repeat(2000) } }],
        upgradeFrom: ['1.1.0'],
        out: join(dir, 'v2.bundle'),
      });
      const src = join(dir, 'v2-parts');
      const byHand = join(dir, 'by-hand');
      const names = await split(v2, src);
      await mkdir(byHand);
      for (const n of names.slice(0, -1)) await copyFile(join(src, n), join(byHand, n));
      const bad = await run(AGENT, ['load', join(byHand, names[0]!), '--config', config]);
      t.equal(bad.code, 2, 'a usage error');
      t.match(
        bad.stderr.split('\n')[0],
        new RegExp(
          `^error: part ${names.length} of ${names.length} \\(${names.at(-1)!.replace(/\./g, '\\.')}\\) is missing from \\S+by-hand: copy every part`,
        ),
        `one line names the part: ${bad.stderr.trim()}`,
      );
      t.notMatch(bad.stderr + bad.stdout, /bundle found/, 'no load began');
      await copyFile(join(src, names.at(-1)!), join(byHand, names.at(-1)!));
      const r = await run(AGENT, ['load', join(byHand, names[2]!), '--config', config, '--json']);
      t.equal(r.code, 0, `loaded from part 3 (${r.stderr.slice(-500)})`);
      t.match(JSON.parse(r.stdout.trim().split('\n').pop()!), { ready: true, version: '1.2.0' });
      const byName = await run(AGENT, [
        'load',
        join(byHand, 'v2.bundle'),
        '--config',
        config,
        '--json',
      ]);
      t.equal(
        byName.code,
        0,
        `loaded again by NAME.bundle, only its parts there (${byName.stderr.slice(-500)})`,
      );
      t.match(JSON.parse(byName.stdout.trim().split('\n').pop()!), {
        ready: true,
        version: '1.2.0',
      });
      const records = JSON.parse(
        await readFile(join(root, 'var/lib/bundle-agent/bundles.json'), 'utf8'),
      );
      const rows = (records.bundles as any[]).filter((r: any) => r.version === '1.2.0');
      t.ok(
        rows.length > 0 && rows.every((r: any) => /^parts:/.test(r.key)),
        `recorded by the identity of its parts (${rows.map((r: any) => r.key).join(', ')})`,
      );
    },
  );
});
