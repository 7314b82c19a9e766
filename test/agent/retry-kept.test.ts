// Once the stick's copy is whole and verified the technician is told the stick may go; a load
// that then fails in the runtime keeps the copy and is tried again from it by itself, so the
// promise holds: the stick is gone, the runtime comes back, the node ends Ready. Real
// containerd; the failing runtime is a pull command that refuses until a flag file exists.
import t from 'tap';
import { mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CriImageClient } from '@offline-bundle/runtime';
import { containerdNode, daemonChild, makeBundle } from './fixtures.js';

const images = [
  { name: 'quay.io/acme/app:1.1.0', files: { 'app.txt': 'app 1.1.0' } },
  { name: 'quay.io/acme/tool:1.1.0', files: { 'tool.txt': 'tool 1.1.0' } },
];

t.test(
  'a pull failure after "you may remove the USB stick": the copy is kept and loaded again with no stick',
  async (t) => {
    const { dir, keys, root, ctd } = await containerdNode(t, 'ob-retry-kept-');
    const flag = join(dir, 'runtime-back');
    const certs = join(root, 'etc/containerd/certs.d');
    const staged = join(root, 'var/lib/upgrade/1.1.0-amd64');
    // refuses until the flag exists, and only once the staged copy is whole (the failure this is about)
    const pull = `while [ ! -e ${staged}/bundle.json ]; do sleep 0.05; done; [ -e ${flag} ] || { echo "runtime unavailable" >&2; exit 1; }; exec ctr -a ${ctd.socket} -n k8s.io images pull --hosts-dir ${certs} "$1" >/dev/null`;
    const config = join(root, 'etc/bundle-agent/config.yaml');
    await writeFile(
      config,
      `${await readFile(config, 'utf8')}preload:\n  method: command\n  command: [sh, -c, ${JSON.stringify(pull)}, sh]\n  retries: 0\nstaging:\n  retrySeconds: 1\n`,
    );
    const drop = join(root, 'var/lib/bundle-agent/drop');
    await mkdir(drop, { recursive: true });
    const file = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images,
      upgradeFrom: ['1.0.0'],
      out: join(drop, '1.1.0.bundle'),
    });
    const statusFile = join(root, 'var/lib/bundle-agent/status.json');
    const agent = daemonChild(t, config, statusFile);

    const failed = await agent.until(
      'failed, copy kept',
      (s: any) =>
        s?.phase === 'Failed' &&
        s.conditions.some((c: any) => c.type === 'Staged' && c.reason === 'KeptForRetry'),
    );
    t.match(
      failed.message,
      /^Not done yet: loading the update 1\.1\.0 into this node failed; it is tried again by itself from the copy on this node's disk\. You may remove the USB stick\./,
      'the line keeps its promise',
    );
    t.notMatch(failed.message, /[Pp]lug the USB stick in again/);
    t.ok((await readdir(staged)).includes('bundle.json'), 'the verified copy is kept');
    t.same(await readdir(join(root, 'var/lib/bundle-agent/retry')), ['1.1.0-amd64.json']);

    // the technician left with the stick; the runtime comes back
    await rm(file);
    await writeFile(flag, '');
    const ready = await agent.until('Ready from the kept copy', (s: any) => s?.phase === 'Ready');
    t.match(ready.message, /^Done: update 1\.1\.0 is loaded on this node/);
    const cri = new CriImageClient(ctd.socket);
    t.teardown(() => cri.close());
    for (const img of images) t.ok(await cri.imageStatus(img.name), `${img.name} in the runtime`);
    t.same(await readdir(join(root, 'var/lib/bundle-agent/retry')), [], 'no retry left');
    t.same(
      (await readdir(join(root, 'var/lib/upgrade'))).filter((n) => n.startsWith('1.1.0')),
      [],
      'the copy goes at Ready (staging.keep false)',
    );
    t.match(await agent.stop(), /loading .*1\.1\.0-amd64 again \(try 1 of 10\)/);
  },
);
