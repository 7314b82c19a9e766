// A repeat load of a release the node already holds, stopped (Ctrl-C) or failing mid-way: the
// release keeps its state (loaded) and its pins, and the next load does not unpin it. The line
// for a file given by hand does not talk about a USB stick. CRI-O files under the node root,
// its reload a command the test holds (CRI-O itself cannot run here).
import t from 'tap';
import { spawn } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  technicianLine,
  FAILURE_SENTENCES,
  DROP_DIRECTORY_MEDIA,
  emptyStatus,
} from '@offline-bundle/status';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, keygen, makeBundle, nodeRoot, run } from './fixtures.js';
import { until } from '../helpers/until.js';

const image = (v: string) => [{ name: `quay.io/acme/app:${v}`, files: { 'app.txt': `app ${v}` } }];

t.test('Ctrl-C during a repeat load of a loaded release: it stays loaded and pinned', async (t) => {
  const dir = await tmpdir(t, 'ob-repeat-load-');
  const keys = await keygen(dir);
  const root = join(dir, 'node');
  const gate = join(dir, 'reload.gate');
  const reload = JSON.stringify([
    'sh',
    '-c',
    `while [ -e ${JSON.stringify(gate)} ]; do sleep 0.05; done`,
  ]);
  const config = await nodeRoot(
    root,
    keys.pub,
    `runtime: crio\nversion:\n  current: "1.0.0"\nspace:\n  reserveBytes: 0\npreload:\n  method: none\nreload:\n  command: ${reload}\nstatus:\n  console: false\n`,
  );
  const bundle = (v: string) =>
    makeBundle(dir, {
      key: keys.key,
      version: v,
      images: image(v),
      upgradeFrom: ['1.0.0'],
      out: join(dir, `${v}.bundle`),
    });
  const b110 = await bundle('1.1.0');
  const b120 = await bundle('1.2.0');
  const b130 = await bundle('1.3.0');
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const readStatus = () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
  const pins = () => readFile(join(root, 'etc/crio/crio.conf.d/offline-bundle-pins.conf'), 'utf8');
  for (const b of [b110, b120])
    t.equal((await run(AGENT, ['load', b, '--config', config])).code, 0);
  t.match(await pins(), /quay\.io\/acme\/app:1\.1\.0/, '1.1.0 pinned');

  await writeFile(gate, '');
  t.teardown(() => rm(gate, { force: true }));
  const load = spawn(process.execPath, [AGENT, 'load', b110, '--config', config], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise<number | null>((r) => load.on('close', r));
  await until(
    'the repeat load holds in Serving',
    async () => (await readStatus())?.phase === 'Serving',
    { timeoutMs: 30_000, stepMs: 50 },
  );
  t.equal((await readStatus())?.phase, 'Serving', 'the repeat load holds in Serving');
  load.kill('SIGINT');
  await rm(gate, { force: true });
  t.equal(await exited, 1, 'stopped');
  const s = await readStatus();
  t.match(
    s.conditions.find((c: any) => c.type === 'Failed'),
    { reason: 'Interrupted' },
  );
  t.match(
    s.history.find((e: any) => e.version === '1.1.0'),
    { state: 'loaded' },
    '1.1.0 is still loaded, not failed',
  );
  t.notMatch(s.message, /stick/i, `a file given by hand: no USB stick in the line: ${s.message}`);

  t.equal((await run(AGENT, ['load', b130, '--config', config])).code, 0);
  t.match(await pins(), /quay\.io\/acme\/app:1\.1\.0/, 'the next load keeps 1.1.0 pinned');
  t.match(
    (await readStatus()).history.find((e: any) => e.version === '1.1.0'),
    { state: 'loaded' },
  );
});

t.test(
  'no failure sentence talks about a stick for a file given by hand or a drop directory',
  async (t) => {
    for (const media of ['file', `${DROP_DIRECTORY_MEDIA}/var/lib/bundle-agent/drop`]) {
      for (const reason of Object.keys(FAILURE_SENTENCES)) {
        const s = {
          ...emptyStatus('node-a'),
          phase: 'Failed' as const,
          bundle: { file: '/x/1.1.0.bundle', media },
          conditions: [
            {
              type: 'Failed' as const,
              status: 'True' as const,
              reason,
              message: 'm',
              lastTransitionTime: '2026-11-01T00:00:00Z',
            },
          ],
        };
        t.notMatch(technicianLine(s), /stick/i, `${reason} (${media})`);
      }
    }
    const stick = {
      ...emptyStatus('node-a'),
      phase: 'Failed' as const,
      bundle: { file: '/media/S/1.1.0.bundle', media: 'USB stick S (/media/S)', version: '1.1.0' },
      conditions: [
        {
          type: 'Failed' as const,
          status: 'True' as const,
          reason: 'Interrupted',
          message: 'm',
          lastTransitionTime: '2026-11-01T00:00:00Z',
        },
      ],
    };
    t.match(technicianLine(stick), /Plug the USB stick in again/, 'a stick is still named');
  },
);
