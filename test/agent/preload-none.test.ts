// preload.method none: the bundle is verified and staged but no image is pulled, and every
// output says so instead of "Done ... loaded". CRI-O mode with a reload command that does
// nothing: no runtime is asked anything (the pins drop-in is only written).
import t from 'tap';
import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, keygen, makeBundle, nodeRoot, run } from './fixtures.js';

t.test('preload.method none ends Ready with NotPreloaded, and the technician reads that nothing was loaded', async (t) => {
  const dir = await tmpdir(t, 'ob-agent-none-');
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const config = await nodeRoot(root, keys.pub, `runtime: crio
version:
  current: "1.0.0"
space:
  reserveBytes: 0
preload:
  method: none
reload:
  command: ["true"]
`);
  const file = await makeBundle(dir, { key: keys.key, version: '1.1.0', images: [{ name: 'quay.io/acme/app:v1', files: { 'a.txt': 'a' } }], upgradeFrom: ['1.0.0'], out: join(dir, 'u.bundle') });
  const r = await run(AGENT, ['load', file, '--config', config]);
  t.equal(r.code, 0, r.stderr.slice(-500));
  const s = JSON.parse(await readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8'));
  const cond = (type: string) => s.conditions.find((c: any) => c.type === type);
  t.equal(s.phase, 'Ready');
  t.equal(cond('Ready')?.reason, 'NotPreloaded', 'the Ready condition says the images were not loaded');
  t.match(cond('Ready')?.message, /NOT loaded \(preload\.method is none\)/);
  t.equal(cond('Preloaded')?.status, 'False');
  t.equal(s.message, 'Checked: update 1.1.0 is valid, but it was NOT loaded on this node (loading is turned off in the node\'s settings). You may remove the USB stick.');
  t.notMatch(s.message, /^Done/, 'never "Done ... loaded"');
  t.match(await readFile(join(root, 'run/issue.d/bundle-agent.issue'), 'utf8'), /^Update: Checked: .*NOT loaded/, 'the console says the same');
});
