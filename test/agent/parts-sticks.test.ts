// A split bundle on two sticks plugged one after another, with a real containerd: the daemon
// copies the first stick's parts into its part spool and tells the technician to remove it and
// which part to bring; the second stick completes the set, which is loaded from the spool as
// from one stick, and the spool is gone after; a third stick with a part cut short is refused
// in one line, nothing held. The sticks are loop-mounted ext4 filesystems, unmounted and
// mounted at the same mount point as a technician swaps them.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { copyFile, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  AGENT,
  BUNDLE,
  canLoopMount,
  containerdNode,
  makeBundle,
  run,
  daemonChild,
} from './fixtures.js';

/** An empty ext4 stick image labelled `label`, not mounted. */
function stickImage(dir: string, label: string): string {
  const img = join(dir, `${label}.img`);
  execFileSync('truncate', ['-s', '32M', img]);
  execFileSync('mkfs.ext4', ['-q', '-F', '-L', label, img]);
  return img;
}

t.test(
  'parts on two sticks, one after another: loaded as from one stick',
  { skip: !canLoopMount(process.env.TMPDIR ?? '/tmp') && 'loop mounts not permitted' },
  async (t) => {
    const { dir, keys, root, config } = await containerdNode(t, 'ob-agent-sticks-');
    const statusFile = join(root, 'var/lib/bundle-agent/status.json');
    const usb = join(root, 'media/usb');
    await mkdir(usb, { recursive: true });
    const file = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images: [{ name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1 '.repeat(2000) } }],
      upgradeFrom: ['1.0.0'],
      out: join(dir, 'update.bundle'),
    });
    const r = await run(BUNDLE, ['split', file, '--size', '1500', '--out', join(dir, 'parts')]);
    t.equal(r.code, 0, r.stderr);
    const parts = (await readdir(join(dir, 'parts'))).filter((n) => n.includes('.part-')).sort();
    const n = parts.length;
    t.ok(n >= 3, `${n} parts`);
    // stick A: parts 1 and 2; stick B: the rest
    const images = { A: stickImage(dir, 'STICKA'), B: stickImage(dir, 'STICKB') };
    const mount = (img: string) => execFileSync('mount', ['-o', 'loop', img, usb]);
    const umount = () => {
      try {
        execFileSync('umount', [usb]);
      } catch {
        /* not mounted */
      }
    };
    t.teardown(umount);
    for (const [img, names] of [
      [images.A, parts.slice(0, 2)],
      [images.B, parts.slice(2)],
    ] as const) {
      mount(img);
      for (const p of names) await copyFile(join(dir, 'parts', p), join(usb, p));
      umount();
    }

    const { out, until } = daemonChild(t, config, statusFile);

    mount(images.A);
    const waiting = await until('the first stick copied', (s) =>
      /^Copied parts/.test(s?.message ?? ''),
    );
    const rest =
      n === 3 ? `part 3 of ${n} of update.bundle` : `parts 3–${n} of ${n} of update.bundle`;
    t.equal(
      waiting.message,
      `Copied parts 1–2 of ${n} of update.bundle. You may remove this stick. Insert the stick with ${rest}.`,
      'the technician line names the part to bring',
    );
    t.equal(waiting.phase, 'Idle');
    t.match(
      waiting.conditions.find((c: any) => c.type === 'MediaDetected'),
      { status: 'True', reason: 'PartsWaiting' },
    );
    const spool = join(root, 'var/lib/upgrade/parts-spool'); // paths.upgradeDir's default, under the node root
    const held = async () =>
      (await readdir(spool).catch(() => [] as string[])).filter((x) => x.includes('.part-')).sort();
    t.same(await held(), parts.slice(0, 2), 'parts 1 and 2 in the spool');
    t.notMatch(out.log, /bundle found/, 'no load tried with half the parts');

    umount();
    await sleep(1500); // the watcher sees the stick go
    mount(images.B);
    const ready = await until('the set is loaded', (s) => s?.phase === 'Ready');
    t.equal(ready.bundle.version, '1.1.0');
    t.match(ready.message, /^Done: update 1\.1\.0 is loaded on this node\./);
    t.equal((out.log.match(/event=ready/g) ?? []).length, 1, 'one load');
    t.match(
      out.log,
      new RegExp(`bundle found: \\S*parts-spool/${parts[0]!.replace(/\./g, '\\.')}`),
      'loaded from the spool',
    );
    const listed = JSON.parse(
      (await run(AGENT, ['releases', 'list', '--json', '--config', config])).stdout,
    );
    t.match(
      listed.releases.find((x: any) => x.version === '1.1.0'),
      { images: 1, imagesPresent: 1 },
      'its image is in containerd',
    );
    t.same(await readdir(spool).catch(() => []), [], 'the spool is gone after the load');

    // a third stick: part 1 cut short beside part 2; refused in one line, nothing held
    umount();
    await sleep(1500);
    const c = stickImage(dir, 'STICKC');
    mount(c);
    await writeFile(
      join(usb, parts[0]!),
      (await readFile(join(dir, 'parts', parts[0]!))).subarray(0, 700),
    );
    await copyFile(join(dir, 'parts', parts[1]!), join(usb, parts[1]!));
    const failed = await until('the cut part is refused', (s) => s?.phase === 'Failed');
    const cond = failed.conditions.find((x: any) => x.type === 'Failed');
    t.equal(cond.reason, 'PartCutShort');
    t.match(
      cond.message,
      new RegExp(
        `^part 1 of ${n} \\(${parts[0]!.replace(/\./g, '\\.')}, this stick\\) is 700 bytes, the other parts 1500: it was cut short`,
      ),
    );
    t.equal(
      failed.message,
      'Failed: A part of the update on this USB stick is shorter than the others: its copy was cut short. Copy it to the stick again and plug the sticks in again.',
    );
    t.same(await readdir(spool).catch(() => []), [], 'nothing held after the refusal');
  },
);
