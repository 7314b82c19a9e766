// A bundle carrying the update path 4.15.40 → 4.16.2 for a cluster on 4.14.30 (#43), made by the
// real `bundle create` from generated releases in a real docker-registry and a saved update graph
// with no 4.14.30 → 4.16.2 edge. The registry is gone before any load, so pulls come only from
// the agent. Shared by the agent's tests of the path (release-path-load, release-path-restore).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage, releaseFiles } from '../helpers/images.mjs';
import { BUNDLE, run } from './fixtures.js';

export interface PathBundle {
  file: string;
  /** The images only 4.15.40 has (its release image, cvo and mco), by digest reference. */
  unique15: string[];
}

export async function makePathBundle(work: string, key: string): Promise<PathBundle> {
  const reg = await startRegistry();
  try {
    const H = reg.host;
    const base = { 'usr/share/base/os-release': 'ID=rhcos\n' };
    const comp = (name: string) =>
      pushImage(
        {
          tag: name,
          platforms: [
            { os: 'linux', architecture: 'amd64', layers: [base, { [`usr/bin/${name}`]: name }] },
          ],
        },
        `${H}/ocp/art:${name}`,
      );
    const [cvo14, cvo15, cvo16, etcd, mco15, mco16] = [
      await comp('cvo-14'),
      await comp('cvo-15'),
      await comp('cvo-16'),
      await comp('etcd'),
      await comp('mco-15'),
      await comp('mco-16'),
    ];
    const release = (
      version: string,
      previous: string[],
      images: Record<string, { digestRef: string }>,
    ) =>
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
                  images: Object.fromEntries(
                    Object.entries(images).map(([k, v]) => [k, v.digestRef]),
                  ),
                }),
              ],
            },
          ],
        },
        `${H}/ocp/release:${version}`,
      );
    const r14 = await release('4.14.30', [], { 'cluster-version-operator': cvo14, etcd });
    const r15 = await release('4.15.40', ['4.14.30'], {
      'cluster-version-operator': cvo15,
      etcd,
      'machine-config-operator': mco15,
    });
    const r16 = await release('4.16.2', ['4.15.40'], {
      'cluster-version-operator': cvo16,
      etcd,
      'machine-config-operator': mco16,
    });
    const graph = join(work, 'graph.json');
    const channels = 'io.openshift.upgrades.graph.release.channels';
    await writeFile(
      graph,
      JSON.stringify({
        nodes: [
          [r14, '4.14.30'],
          [r15, '4.15.40'],
          [r16, '4.16.2'],
        ].map(([r, version]) => ({
          version,
          payload: r.digestRef,
          metadata: { [channels]: 'eus-4.16' },
        })),
        edges: [
          [0, 1],
          [1, 2],
        ],
      }),
    );
    const spec = join(work, 'bundle.yaml');
    await writeFile(
      spec,
      stringify({
        apiVersion: 'offline-bundle/v1alpha1',
        kind: 'Bundle',
        release: { channel: 'eus-4.16', version: '4.16.2', from: '4.14.30', updateGraph: graph },
      }),
    );
    const file = join(work, 'path.bundle');
    const r = await run(BUNDLE, [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--cache',
      join(work, 'cache'),
      '-f',
      spec,
      '--key',
      key,
      '-o',
      file,
    ]);
    if (r.code !== 0) throw new Error(`bundle create: ${r.stderr}`);
    return { file, unique15: [r15, cvo15, mco15].map((i) => i.digestRef as string) };
  } finally {
    await reg.stop();
  }
}
