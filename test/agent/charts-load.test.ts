// A Helm chart in a bundle (#23 item 3) on a CRI-O node (the CRI-O contract stand-in,
// test/helpers/crio-standin.mjs: CRI-O cannot run here; it pulls, and refuses to pull what is
// not an image, as CRI-O does): the load ends Ready with the images pulled and pinned, the chart
// neither pulled nor in the pinned_images drop-in, and the node's registry (bundle-agent serve, the
// catalog the load's temporary registry answers from) serves the chart to skopeo by both its names.
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
// @ts-expect-error: JavaScript helpers without type declarations
import { startCrioStandin } from '../helpers/crio-standin.mjs';
// @ts-expect-error: JavaScript helpers without type declarations
import { pushChart, pushImage } from '../helpers/images.mjs';
// @ts-expect-error: JavaScript helpers without type declarations
import { startRegistry, skopeoCopy, skopeoInspectRaw, sha256 } from '../helpers/registry.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, BUNDLE, crioFiles, crioNodeConfig, crioSighup, keygen, run } from './fixtures.js';

/** Every file under `dir` (relative paths). */
async function walk(dir: string, rel = ''): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(join(dir, rel), { withFileTypes: true }).catch(() => [])) {
    if (e.isDirectory()) out.push(...(await walk(dir, join(rel, e.name))));
    else out.push(join(rel, e.name));
  }
  return out;
}

/** `bundle-agent serve ARGS --json`: the address it prints; stopped at teardown. */
async function serve(t: any, args: string[]): Promise<string> {
  const child = spawn(process.execPath, [AGENT, 'serve', ...args, '--json'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => {
    child.kill('SIGTERM');
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    err += d;
  });
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d;
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    child.on('exit', (code) => reject(new Error(`serve exited ${code}: ${err}`)));
  });
  return (JSON.parse(line) as { address: string }).address;
}

t.test(
  'a chart in the bundle: served by the node, never pulled or pinned; the node ends Ready',
  async (t) => {
    const reg = await startRegistry({ timeoutMs: 30_000 });
    t.teardown(() => reg.stop());
    const dir = await tmpdir(t, 'ob-chart-node-');
    const keys = await keygen(dir);
    const root = join(dir, 'node');
    const crio = await startCrioStandin(t, await crioFiles(root));
    await writeFile(join(root, 'run/crio/pid'), String(crio.pid));
    // the disk is shared with other work: the kubelet's image GC threshold is not under test
    await mkdir(join(root, 'var/lib/kubelet'), { recursive: true });
    await writeFile(
      join(root, 'var/lib/kubelet/config.yaml'),
      'kind: KubeletConfiguration\nimageGCHighThresholdPercent: 100\nevictionHard:\n  imagefs.available: 1Mi\n  nodefs.available: 1Mi\n',
    );
    const config = await crioNodeConfig(root, keys.pub, {
      reload: crioSighup(join(root, 'run/crio/pid')),
      extra: 'preload:\n  method: cri\n  retries: 1\n',
    });

    const app = await pushImage(
      {
        tag: 'v1',
        platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app.txt': 'app v1' }] }],
      },
      `${reg.host}/acme/app:v1`,
    );
    const chart = await pushChart(
      { name: 'demo', version: '0.1.0', provenance: 'prov\n' },
      `${reg.host}/charts/demo:0.1.0`,
    );
    const file = join(dir, 'update.bundle');
    const c = await run(BUNDLE, [
      'create',
      '--quiet',
      '--version',
      '1.1.0',
      '--upgrade-from',
      '1.0.0',
      '--image',
      app.ref,
      '--chart',
      `oci://${chart.ref}`,
      '--tls-verify=false',
      '--key',
      keys.key,
      '--cache',
      join(dir, 'cache'),
      '-o',
      file,
    ]);
    t.equal(c.code, 0, c.stderr);
    // the origin goes: only the node can serve the image and the chart now
    await reg.stop();

    const r = await run(AGENT, ['load', file, '--config', config, '--json'], process.env, 120_000);
    t.equal(r.code, 0, `load exits 0 (stderr: ${r.stderr.slice(-800)})`);
    const status = JSON.parse(
      await readFile(join(root, 'var/lib/bundle-agent/status.json'), 'utf8'),
    );
    t.equal(status.phase, 'Ready');
    t.equal(
      status.conditions.find((x: any) => x.type === 'Pinned')?.status,
      'True',
      'the image pinned, as the runtime reports',
    );

    const pulls = (await crio.events())
      .filter((e: any) => e.event === 'pull')
      .map((e: any) => String(e.ref));
    t.ok(
      pulls.length > 0 && pulls.every((p: string) => !p.includes('charts/demo')),
      `the runtime was asked for the image only (${pulls.join(', ')})`,
    );
    const dropIns = await walk(join(root, 'etc/crio/crio.conf.d'));
    const pinned = (
      await Promise.all(dropIns.map((f) => readFile(join(root, 'etc/crio/crio.conf.d', f), 'utf8')))
    ).join('\n');
    t.match(pinned, /pinned_images/, 'the pins drop-in is written');
    t.match(pinned, /acme\/app/, 'with the image');
    t.notMatch(pinned, /charts\/demo/, 'not the chart');

    // the node's registry (the load's catalog, which bundle-agent serve answers from too) serves the chart
    const address = await serve(t, [file, '--key', keys.pub]);
    const raw = await skopeoInspectRaw(`docker://${address}/charts/demo:0.1.0`);
    t.equal(sha256(raw), chart.digest, "the chart's manifest, by its short name");
    const out = join(dir, 'pulled');
    await skopeoCopy(
      `docker://${address}/${reg.host.replace(':', '_')}/charts/demo:0.1.0`,
      `oci:${out}:demo`,
    );
    const blobs = (await readdir(join(out, 'blobs/sha256'))).map((h) => `sha256:${h}`).sort();
    t.same(
      blobs,
      [...chart.blobs].sort(),
      'skopeo copies the whole chart (manifest, config, chart, provenance) by the mirror name too',
    );
  },
);
