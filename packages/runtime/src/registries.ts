// containers-registries.conf(5) drop-in that sends each source repository of a bundle to the
// local mirror registry. CRI-O, podman, skopeo and buildah read it through containers/image.
import path from 'node:path';
import { mirrorPath } from '@offline-bundle/oci';
import { stringify } from 'smol-toml';
import { RuntimeError } from './errors.js';
import {
  MANAGED_MARKER,
  assertFileName,
  assertNotForeign,
  removeManagedFile,
  writeFileAtomic,
} from './files.js';
import { assertHost, assertRepository } from './validate.js';

export interface MirroredRepository {
  /** Source repository, fully qualified: "quay.io/ns/app". */
  repository: string;
  /** Only digest references are pulled from the mirror (`pull-from-mirror = "digest-only"`). */
  digestOnly: boolean;
}

export interface RegistriesDropInSpec {
  /** The local mirror registry, "127.0.0.1:PORT". */
  mirror: string;
  repositories: MirroredRepository[];
}

/**
 * Render the drop-in: one `[[registry]]` per source repository (`prefix` = `location` = the
 * repository) with one `[[registry.mirror]]` at `<mirror>/<mirrorPath(repository)>`,
 * `insecure = true` (plain HTTP on loopback) and, for digest-only repositories,
 * `pull-from-mirror = "digest-only"`. A repository listed twice is digest-only only if every
 * entry says so (a tag reference needs the mirror to answer tags). Output is sorted, so the
 * same spec always renders the same bytes.
 */
export function renderRegistriesDropIn(spec: RegistriesDropInSpec): string {
  assertHost(spec.mirror, 'mirror address');
  if (!Array.isArray(spec.repositories) || spec.repositories.length === 0) {
    throw new RuntimeError('INVALID_SPEC', 'a registries drop-in needs at least one repository');
  }
  const digestOnly = new Map<string, boolean>();
  for (const r of spec.repositories) {
    assertRepository(r.repository);
    digestOnly.set(r.repository, (digestOnly.get(r.repository) ?? true) && r.digestOnly === true);
  }
  const registry = [...digestOnly.keys()].sort().map((repository) => ({
    prefix: repository,
    location: repository,
    mirror: [
      {
        location: `${spec.mirror}/${mirrorPath(repository)}`,
        insecure: true,
        ...(digestOnly.get(repository) ? { 'pull-from-mirror': 'digest-only' } : {}),
      },
    ],
  }));
  return `${MANAGED_MARKER}\n# containers-registries.conf(5) drop-in: source repositories served by the local bundle registry.\n\n${stringify({ registry })}`;
}

/** Write `<dir>/<name>` atomically (see renderRegistriesDropIn); returns its path. */
export async function writeRegistriesDropIn(
  dir: string,
  name: string,
  spec: RegistriesDropInSpec,
): Promise<string> {
  assertFileName(name);
  if (!name.endsWith('.conf')) {
    // containers/image only reads *.conf files from registries.conf.d.
    throw new RuntimeError(
      'INVALID_SPEC',
      `registries.conf.d drop-in name must end in .conf: ${JSON.stringify(name)}`,
    );
  }
  const content = renderRegistriesDropIn(spec);
  const file = path.join(dir, name);
  await assertNotForeign(file);
  await writeFileAtomic(file, content);
  return file;
}

/**
 * Remove a drop-in this package wrote (registries.conf.d or crio.conf.d). Idempotent: a
 * missing file is fine. A file without the offline-bundle marker is never removed
 * (FOREIGN_FILE). Returns whether a file was removed.
 */
export async function removeDropIn(file: string): Promise<boolean> {
  return removeManagedFile(file);
}
