// A load from the part spool stopped by SIGTERM keeps the parts held, and the next start loads
// them: with a real containerd, a loop-mounted ext4 stick and the cluster API stand-in paused,
// so the load waits for the cluster (Verifying) until the agent is stopped, deterministically.
import t from 'tap';
import { copyFile, mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { startKubeStandIn } from '../helpers/kube-standin.js';
import { BUNDLE, containerdNode, daemonChild, makeBundle, run, stick } from './fixtures.js';
import { until } from '../helpers/until.js';

t.test(
  'SIGTERM during a load from the spool: the parts stay; the next start loads them and empties the spool',
  async (t) => {
    const { dir, keys, root, config } = await containerdNode(t, 'ob-spool-stop-');
    const api = await startKubeStandIn({ clusterVersion: '1.0.0' });
    t.teardown(() => api.close());
    const shipped = parseYaml(
      readFileSync(new URL('../../deploy/openshift/config.yaml.in', import.meta.url), 'utf8'),
    );
    await writeFile(
      config,
      (await readFile(config, 'utf8')).replace(
        'version:\n  current: "1.0.0"\n',
        stringifyYaml({
          version: shipped.version,
          status: { kubeconfig: shipped.status.kubeconfig },
        }),
      ),
    );
    await api.writeNodeKubeconfig(root, 'node-a', { certPaths: 'root' });
    await api.pause();
    const statusFile = join(root, 'var/lib/bundle-agent/status.json');
    const usb = join(root, 'media/usb');
    t.equal(await stick(dir, usb, 64, t), 'loop', 'the stick is a loop-mounted ext4 filesystem');
    const file = await makeBundle(dir, {
      key: keys.key,
      version: '1.1.0',
      images: [{ name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1 '.repeat(2000) } }],
      upgradeFrom: ['1.0.0'],
      out: join(dir, 'update.bundle'),
    });
    const out = join(dir, 'parts');
    await mkdir(out);
    const split = await run(BUNDLE, ['split', file, '--size', '1500', '--out', out]);
    t.equal(split.code, 0, split.stderr);
    const parts = (await readdir(out)).filter((n) => n.includes('.part-')).sort();
    const spool = join(root, 'var/lib/upgrade/parts-spool');
    const held = async () =>
      (await readdir(spool).catch(() => [] as string[])).filter((n) => n.includes('.part-')).length;

    // first the stick with every part but part 2; then, on it alone, part 2: the set is whole in the spool only
    for (const p of parts.filter((_, i) => i !== 1)) await copyFile(join(out, p), join(usb, p));
    const first = daemonChild(t, config, statusFile);
    await first.until('the parts held', (s) => /^Copied parts/.test(s?.message ?? ''));
    for (const p of parts.filter((_, i) => i !== 1)) await rm(join(usb, p));
    await copyFile(join(out, parts[1]!), join(usb, parts[1]!));
    await first.until(
      'the load from the spool waits for the cluster',
      (s) =>
        s?.phase === 'Verifying' && /parts copied from USB sticks/.test(s?.bundle?.media ?? ''),
    );
    t.equal(await held(), parts.length, 'the spool holds every part');
    await first.stop();
    t.equal(await held(), parts.length, 'stopped mid-load: every part kept');
    t.match(
      first.out.log,
      /the parts held in \S+ are kept: the load ended without a verdict on them/,
    );

    await rm(join(usb, parts[1]!));
    await api.resume();
    const second = daemonChild(t, config, statusFile);
    const ready = await second.until('the restart loads the spool', (s) => s?.phase === 'Ready');
    t.match(ready.bundle, { version: '1.1.0', media: /^parts copied from USB sticks/ });
    t.match(ready.message, /You may remove the USB stick\./);
    await until('the spool ends with the load', async () => (await held()) === 0, {
      timeoutMs: 5000,
    });
    await second.stop();
  },
);
