// A load from the part spool stopped by SIGTERM keeps the parts held, and the next start loads
// them: with a real containerd, a loop-mounted ext4 stick and the cluster API stand-in paused,
// so the load waits for the cluster (Verifying) until the agent is stopped, deterministically.
import t from 'tap';
import { spawn } from 'node:child_process';
import { copyFile, mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { AGENT, BUNDLE, containerdNode, makeBundle, run, stick } from './fixtures.js';

t.test('SIGTERM during a load from the spool: the parts stay; the next start loads them and empties the spool', async (t) => {
  const { dir, keys, root, config } = await containerdNode(t, 'ob-spool-stop-');
  const api = await startKubeStandIn({ clusterVersion: '1.0.0' });
  t.teardown(() => api.close());
  const shipped = parseYaml(readFileSync(new URL('../../deploy/openshift/config.yaml.in', import.meta.url), 'utf8'));
  await writeFile(config, (await readFile(config, 'utf8')).replace('version:\n  current: "1.0.0"\n', stringifyYaml({ version: shipped.version, status: { kubeconfig: shipped.status.kubeconfig } })));
  await api.writeNodeKubeconfig(root, 'node-a', { certPaths: 'root' });
  await api.pause();
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const usb = join(root, 'media/usb');
  t.equal(await stick(dir, usb, 64, t), 'loop', 'the stick is a loop-mounted ext4 filesystem');
  const file = await makeBundle(dir, { key: keys.key, version: '1.1.0', images: [{ name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1 '.repeat(2000) } }], upgradeFrom: ['1.0.0'], out: join(dir, 'update.bundle') });
  const out = join(dir, 'parts');
  await mkdir(out);
  const split = await run(BUNDLE, ['split', file, '--size', '1500', '--out', out]);
  t.equal(split.code, 0, split.stderr);
  const parts = (await readdir(out)).filter((n) => n.includes('.part-')).sort();
  const spool = join(root, 'var/lib/upgrade/parts-spool');
  const held = async () => (await readdir(spool).catch(() => [] as string[])).filter((n) => n.includes('.part-')).length;

  let log = '';
  const start = () => {
    const child = spawn(process.execPath, [AGENT, 'run', '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (d) => (log += d));
    child.stderr.on('data', (d) => (log += d));
    const exited = new Promise((r) => child.once('exit', r));
    t.teardown(async () => {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
    });
    return { child, exited };
  };
  const until = async (what: string, ok: (s: any) => boolean) => {
    const deadline = Date.now() + 120_000; // only against a hang
    for (;;) {
      const s = await readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
      if (ok(s)) return s;
      if (Date.now() > deadline) throw new Error(`never: ${what}; status: ${JSON.stringify(s)?.slice(0, 1500)}; log: ${log.slice(-2000)}`);
      await sleep(200);
    }
  };

  // first the stick with every part but part 2; then, on it alone, part 2: the set is whole in the spool only
  for (const p of parts.filter((_, i) => i !== 1)) await copyFile(join(out, p), join(usb, p));
  const first = start();
  await until('the parts held', (s) => /^Copied parts/.test(s?.message ?? ''));
  for (const p of parts.filter((_, i) => i !== 1)) await rm(join(usb, p));
  await copyFile(join(out, parts[1]!), join(usb, parts[1]!));
  await until('the load from the spool waits for the cluster', (s) => s?.phase === 'Verifying' && /parts copied from USB sticks/.test(s?.bundle?.media ?? ''));
  t.equal(await held(), parts.length, 'the spool holds every part');
  first.child.kill('SIGTERM');
  await first.exited;
  t.equal(await held(), parts.length, 'stopped mid-load: every part kept');
  t.match(log, /the parts held in \S+ are kept: the load ended without a verdict on them/);

  await rm(join(usb, parts[1]!));
  await api.resume();
  log = '';
  const second = start();
  const ready = await until('the restart loads the spool', (s) => s?.phase === 'Ready');
  t.match(ready.bundle, { version: '1.1.0', media: /^parts copied from USB sticks/ });
  t.match(ready.message, /You may remove the USB stick\./);
  for (let i = 0; i < 50 && (await held()) > 0; i++) await sleep(100);
  t.equal(await held(), 0, 'the spool ends with the load');
  second.child.kill('SIGTERM');
  await second.exited;
});
