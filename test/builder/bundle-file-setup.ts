// Shared set-up of the bundle-file tests (bundle-file.test.ts: the file, graph, oc-mirror, --dry-run,
// diff; bundle-file-errors.test.ts: schema, limits, errors), split so each file stays well under
// tap's per-file timeout on a loaded machine: one registry with two OpenShift-shaped releases.
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, releaseFiles } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, keygen } from './lib.js';

export const reg = await startRegistry();
t.teardown(() => reg.stop());
export const work = await tmpdir(t, 'ob-file-');
export const keys = await keygen(work);
export const H = reg.host;
export const EPOCH = { SOURCE_DATE_EPOCH: '1700000000' };

export const app = await pushImage(
  { tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '1' }] }] },
  `${H}/team/app:v1`,
);
export const tool = await pushImage(
  { tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'tool/v': '1' }] }] },
  `${H}/team/tool:v1`,
);
export const cvo1 = await pushImage(
  {
    tag: 'cvo-1',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'usr/bin/cvo': 'cvo 1' }] }],
  },
  `${H}/ocp/art:cvo-1`,
);
export const cvo2 = await pushImage(
  {
    tag: 'cvo-2',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'usr/bin/cvo': 'cvo 2' }] }],
  },
  `${H}/ocp/art:cvo-2`,
);
export const etcd = await pushImage(
  {
    tag: 'etcd',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'usr/bin/etcd': 'etcd' }] }],
  },
  `${H}/ocp/art:etcd`,
);
export const release = async (version: string, previous: string[], cvo: string) =>
  pushImage(
    {
      tag: version,
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [
            releaseFiles({
              version,
              previous,
              images: { 'cluster-version-operator': cvo, etcd: etcd.digestRef },
            }),
          ],
        },
      ],
    },
    `${H}/ocp/release:${version}`,
  );
export const rel1 = await release('4.14.1', ['4.14.0'], cvo1.digestRef);
export const rel2 = await release('4.14.2', ['4.14.1'], cvo2.digestRef);

// The graph service's answer for stable-4.14 (and a node of another channel), by digest.
export const graphFile = path.join(work, 'graph.json');
export const channels = 'io.openshift.upgrades.graph.release.channels';
await writeFile(
  graphFile,
  JSON.stringify({
    nodes: [
      {
        version: '4.14.1',
        payload: rel1.digestRef,
        metadata: { [channels]: 'candidate-4.14,stable-4.14' },
      },
      {
        version: '4.14.2',
        payload: rel2.digestRef,
        metadata: { [channels]: 'candidate-4.14,stable-4.14' },
      },
      {
        version: '4.14.3',
        payload: `${H}/ocp/release@sha256:${'0'.repeat(64)}`,
        metadata: { [channels]: 'candidate-4.14' },
      },
    ],
    edges: [
      [0, 1],
      [1, 2],
    ],
  }),
);

export let n = 0;
/** A fresh directory with FILE (an object, written as YAML) in it, and `bundle create -f FILE ARGS` run there. */
export async function createFrom(doc: object | string, args: string[] = []) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'bundle.yaml');
  await writeFile(file, typeof doc === 'string' ? doc : stringify(doc));
  const r = await bundle(
    [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--cache',
      path.join(work, 'cache'),
      '-f',
      file,
      ...args,
    ],
    { env: EPOCH, cwd: dir },
  );
  return { ...r, dir, file };
}
export const own = (fields: object) => ({
  apiVersion: 'offline-bundle/v1alpha1',
  kind: 'Bundle',
  ...fields,
});
export const refs = (m: { images: { repository: string; tag: string | null; digest: string }[] }) =>
  m.images.map((i) => (i.tag ? `${i.repository}:${i.tag}` : `${i.repository}@${i.digest}`)).sort();
