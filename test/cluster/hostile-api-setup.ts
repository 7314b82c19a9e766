// What both hostile-API test files start from: the stand-in, an admin kubeconfig for it, a
// signed bundle for prepare/upgrade, and the four `bundle cluster` commands.
import path from 'node:path';
import { writeKubeconfig, tmpdir } from '../status/lib.js';
import { makeBundle } from './lib.js';
import { releaseKey, signRelease } from '../builder/release-signing.js';
import { HostileApi } from './hostile-api.js';

type T = Parameters<typeof tmpdir>[0];

export async function hostileSetup(t: T) {
  const work = await tmpdir(t, 'ob-hostile-api-');
  const h = await HostileApi.start();
  t.teardown(() => h.close());
  const kubeconfig = await writeKubeconfig(path.join(work, 'kubeconfig'), h.port, 'admin-token', 'http');
  const key = await releaseKey();
  const b = await makeBundle(path.join(work, 'b'), { version: '4.15.1', upgradeFrom: ['4.15.0'], sign: async (d, ref) => [await signRelease(key, ref, d)] });
  const server = `http://127.0.0.1:${h.port}`;
  // --request-timeout 2: the deadline under test; the attacks without one never end on their own
  const commands: [string, string[]][] = [
    ['status', ['cluster', 'status']],
    ['prepare', ['cluster', 'prepare', b.file, '--key', b.pub]],
    ['upgrade', ['cluster', 'upgrade', b.file, '--key', b.pub]],
    ['rbac', ['cluster', 'rbac']],
  ];
  return { h, kubeconfig, server, commands };
}
