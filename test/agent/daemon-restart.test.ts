// The daemon over restarts, with a real containerd: what was loaded is not loaded again, what
// a technician last read stays what they read, a paused copy into the drop directory is not
// taken, and images that vanished from the runtime are loaded again from the stick.
import t from 'tap';
import { spawn } from 'node:child_process';
import { copyFile, open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { CriImageClient } from '@offline-bundle/runtime';
import { AGENT, containerdNode, daemonChild, makeBundle } from './fixtures.js';

const images = [{ name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1' } }];

async function node(t: any) {
  const { dir, keys, root, ctd, config } = await containerdNode(t, 'ob-agent-restart-');
  const cri = new CriImageClient(ctd.socket);
  t.teardown(() => cri.close());
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const status = () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
  /** Runs the daemon until `ok` holds on its log and status, then stops it with SIGTERM; returns its log. */
  const daemon = async (ok: (log: string, s: any) => boolean): Promise<string> => {
    const d = daemonChild(t, config, statusFile);
    try {
      await d.until('the daemon got there', (s, log) => ok(log, s));
    } finally {
      await d.stop();
    }
    return d.out.log;
  };
  const drop = join(root, 'var/lib/bundle-agent/drop');
  execFileSync('mkdir', ['-p', drop]);
  return { dir, keys, root, config, ctd, cri, status, daemon, drop };
}

const count = (log: string, re: RegExp) => (log.match(re) ?? []).length;

t.test('two daemon restarts after Ready cause no second staging or pull; a vanished image is loaded again', async (t) => {
  const n = await node(t);
  const file = await makeBundle(n.dir, { key: n.keys.key, version: '1.1.0', images, upgradeFrom: ['1.0.0'], out: join(n.dir, 'update.bundle') });
  await copyFile(file, join(n.drop, 'update.bundle'));
  const first = await n.daemon((_l, s) => s?.phase === 'Ready');
  t.ok(count(first, /event=preload/g) > 0, 'first start: the image is pulled');
  t.match((await n.status()).message, /^Done/, 'Ready: the technician reads Done');

  for (const i of [1, 2]) {
    // the daemon has scanned the drop directory once it says the file was loaded before
    const log = await n.daemon((l) => /was loaded before this start/.test(l));
    t.equal(count(log, /event=verified|event=preload|event=staging/g), 0, `restart ${i}: no verification, staging or pull`);
    const s = await n.status();
    t.equal(s.phase, 'Ready', `restart ${i}: still Ready`);
    t.match(s.message, /^Done: update 1\.1\.0 is loaded/, `restart ${i}: the technician still reads Done`);
  }

  // a reboot remounts the stick: another device number (sticks enumerated in another order), and
  // on FAT inode numbers assigned anew. Here: the same bytes and mtime under a new inode.
  const kept = join(n.dir, 'kept.bundle');
  execFileSync('cp', ['-p', join(n.drop, 'update.bundle'), kept]);
  execFileSync('rm', [join(n.drop, 'update.bundle')]);
  execFileSync('cp', ['-p', kept, join(n.drop, 'update.bundle')]);
  const remounted = await n.daemon((l) => /was loaded before this start/.test(l) || /event=ready/.test(l));
  t.equal(count(remounted, /event=verified|event=preload|event=staging/g), 0, 'remounted (new inode, same bytes): not loaded again');
  t.match(remounted, /was loaded before this start/);

  // the runtime lost the image (crio wipe after an unclean shutdown, a pruned store)
  const ref = (await n.cri.listImages()).find((i) => i.repoTags.includes('quay.io/acme/app:v1'));
  t.ok(ref, 'the image is in containerd');
  execFileSync('ctr', ['-a', n.ctd.socket, '-n', 'k8s.io', 'images', 'rm', ...(await n.cri.listImages()).flatMap((i) => [...i.repoTags, ...i.repoDigests])]);
  const again = await n.daemon((l, s) => /event=preload/.test(l) && s?.phase === 'Ready');
  t.ok(count(again, /event=preload/g) > 0, 'a loaded bundle whose images vanished is loaded again');
  t.ok((await n.cri.listImages()).some((i) => i.repoTags.includes('quay.io/acme/app:v1')), 'the image is back');
});

t.test('a copy into the drop directory that pauses mid-way is not taken; finished, it is', async (t) => {
  const n = await node(t);
  const file = await makeBundle(n.dir, { key: n.keys.key, version: '1.1.0', images, upgradeFrom: ['1.0.0'], out: join(n.dir, 'update.bundle') });
  const bytes = await readFile(file);
  // a writer that stops half-way for longer than several polls
  const fh = await open(join(n.drop, 'update.bundle'), 'w');
  await fh.write(bytes.subarray(0, Math.floor(bytes.length / 2)));
  await fh.sync();
  const paused = await new Promise<string>((resolve) => {
    const child = spawn(process.execPath, [AGENT, 'run', '--config', n.config], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stderr.on('data', (d: Buffer) => { out += d; });
    setTimeout(() => { child.kill('SIGTERM'); }, 5000);
    child.once('exit', () => resolve(out));
  });
  t.equal(count(paused, /event=media .*update\.bundle|bundle found/g), 0, 'five seconds (five polls) of a paused copy: not taken');
  t.notOk((await n.status())?.phase === 'Failed', 'and no failure reported for it');
  await fh.write(bytes.subarray(Math.floor(bytes.length / 2)));
  await fh.close();
  const done = await n.daemon((_l, s) => s?.phase === 'Ready' || s?.phase === 'Failed');
  t.equal((await n.status()).phase, 'Ready', `once complete it is loaded (${done.slice(-300)})`);
});
