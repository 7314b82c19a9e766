// containerd registry host configuration (docs/hosts.md): <config_path>/<host>/hosts.toml.
// containerd re-reads it on every pull; CRI uses it when the CRI plugin's
// registry.config_path points at the directory.
import { rmdir } from 'node:fs/promises';
import path from 'node:path';
import { mirrorPath } from '@offline-bundle/oci';
import { makeDirs } from '@offline-bundle/host';
import { stringify } from 'smol-toml';
import { RuntimeError } from './errors.js';
import { MANAGED_MARKER, assertNotForeign, removeManagedFile, writeFileAtomic } from './files.js';
import { assertHost } from './validate.js';

/**
 * Directory name containerd looks up for a registry host: the host namespace itself,
 * "host" or "host:port" (containerd 1.6 and later on Unix; 1.7+ also tries "host_port_"
 * first, which we do not write so that both versions read the same file).
 */
export function containerdHostDir(registryHost: string): string {
  assertHost(registryHost, 'registry host');
  return registryHost;
}

/** The upstream server for a registry host namespace (docker.io's API lives elsewhere). */
function upstreamServer(registryHost: string): string {
  return registryHost === 'docker.io' ? 'https://registry-1.docker.io' : `https://${registryHost}`;
}

/**
 * hosts.toml sending `registryHost`'s images to the local mirror. With `override_path = true`
 * containerd uses the host URL's path as the API root instead of appending `/v2`, and then
 * appends `/<repository path>/manifests|blobs/...`; so the host URL
 * `http://<mirror>/v2/<mirrorPath(registryHost)>` makes containerd request
 * `/v2/<mirrorPath(registryHost/repo)>/manifests/<ref>` (plus a `?ns=<registryHost>` query
 * that the registry may ignore) - exactly the names the mirror serves.
 * `resolve` lets the mirror turn tags into digests, so tag references work too.
 */
export function renderContainerdHosts(registryHost: string, mirror: string): string {
  assertHost(registryHost, 'registry host');
  assertHost(mirror, 'mirror address');
  const doc = {
    server: upstreamServer(registryHost),
    host: {
      [`http://${mirror}/v2/${mirrorPath(registryHost)}`]: {
        capabilities: ['pull', 'resolve'],
        override_path: true,
      },
    },
  };
  return `${MANAGED_MARKER}\n# containerd hosts.toml: ${registryHost} images served by the local bundle registry.\n\n${stringify(doc)}`;
}

/**
 * Write `<certsDir>/<registryHost>/hosts.toml` atomically; returns its path. An existing
 * hosts.toml that offline-bundle did not write is left alone (FOREIGN_FILE).
 */
export async function writeContainerdHosts(
  certsDir: string,
  registryHost: string,
  mirror: string,
): Promise<string> {
  const content = renderContainerdHosts(registryHost, mirror);
  const dir = path.join(certsDir, containerdHostDir(registryHost));
  const file = path.join(dir, 'hosts.toml');
  try {
    await makeDirs(dir);
  } catch (e) {
    const nospace = (e as NodeJS.ErrnoException).code === 'ENOSPC';
    throw new RuntimeError(
      nospace ? 'NO_SPACE' : 'WRITE_FAILED',
      `cannot create ${dir}: ${(e as Error).message}`,
      { cause: e },
    );
  }
  await assertNotForeign(file);
  await writeFileAtomic(file, content);
  return file;
}

/**
 * Remove the hosts.toml written by writeContainerdHosts (and its directory when that is
 * then empty). Idempotent. A hosts.toml without the offline-bundle marker is never removed
 * (FOREIGN_FILE). Returns whether a file was removed.
 */
export async function removeContainerdHosts(
  certsDir: string,
  registryHost: string,
): Promise<boolean> {
  const dir = path.join(certsDir, containerdHostDir(registryHost));
  const removed = await removeManagedFile(path.join(dir, 'hosts.toml'));
  if (removed) await rmdir(dir).catch(() => {}); // only succeeds when empty
  return removed;
}
