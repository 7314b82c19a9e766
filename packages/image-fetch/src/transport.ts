import { resolve } from 'node:path';
import { quoteName } from '@offline-bundle/host';
import { DockerArchiveSource } from './docker-archive-source.js';
import { DirSource } from './dir-source.js';
import { DockerSource } from './docker-source.js';
import { OciError, parseReference, type ImageReference } from '@offline-bundle/oci';
import { LayoutSource } from './layout-source.js';
import { unpackArchive } from './archive-unpack.js';
import type { RegistryClient } from './registry-client.js';
import { RegistriesConf } from './registries-conf.js';
import type { ImageSource } from './source.js';

type TransportName = 'docker' | 'oci' | 'oci-archive' | 'docker-archive' | 'dir';

export interface SourceSpec {
  transport: TransportName;
  /** Image reference (docker) or path (the others). */
  target: string;
  /** oci:DIR:REF / docker-archive:FILE:REF. */
  ref?: string;
  /** "=registry/repo:tag": the name the image gets in the bundle. */
  name?: string;
  raw: string;
  /** docker: the reference already parsed, when its text would not parse back to it (an oci:// name's host without a dot). */
  reference?: ImageReference;
}

interface TransportContext {
  client: RegistryClient;
  registriesConf?: RegistriesConf;
  /** --tls-verify=false: every registry may be reached without TLS checks. */
  insecure?: boolean;
}

const TRANSPORTS: TransportName[] = ['docker', 'oci', 'oci-archive', 'docker-archive', 'dir'];
/** containers/image transports we do not read: named so they are never taken for a registry host. */
const FOREIGN_TRANSPORTS = ['containers-storage', 'docker-daemon', 'ostree', 'sif', 'tarball'];

/** Splits "transport:rest[=NAME]" once; each transport then reads its own part (as containers/image). */
export function parseSourceSpec(raw: string): SourceSpec {
  let rest = raw.trim();
  let name: string | undefined;
  const eq = rest.lastIndexOf('=');
  if (eq > 0) {
    name = rest.slice(eq + 1);
    rest = rest.slice(0, eq);
  }
  let transport: TransportName = 'docker';
  const m = /^([a-z-]+):/.exec(rest);
  if (m && (TRANSPORTS as string[]).includes(m[1]!)) {
    transport = m[1] as TransportName;
    rest = rest.slice(m[0].length);
    if (transport === 'docker') {
      if (!rest.startsWith('//'))
        throw new OciError(
          'UNSUPPORTED_TRANSPORT',
          `${quoteName(raw)}: write docker://REGISTRY/REPO[:TAG|@DIGEST]`,
        );
      rest = rest.slice(2);
    }
  } else if (m) {
    // "host:5000/repo" and "busybox:latest" are registry names; "dir:/x" or "containers-storage:a/b" name a transport we lack.
    const after = rest.slice(m[0].length);
    if (m[1] === 'containers-storage') {
      // podman's store is only safe to read through its own locking code
      throw new OciError(
        'UNSUPPORTED_TRANSPORT',
        `${quoteName(raw)}: containers-storage: is not read directly: export the image first with "podman save --format oci-archive -o IMAGE.tar ${after || 'IMAGE'}" (or "skopeo copy containers-storage:${after || 'IMAGE'} oci-archive:IMAGE.tar") and pass oci-archive:IMAGE.tar`,
      );
    }
    if (FOREIGN_TRANSPORTS.includes(m[1]!) || (!/^\d/.test(after) && after.includes('/'))) {
      throw new OciError(
        'UNSUPPORTED_TRANSPORT',
        `${quoteName(raw)}: unknown transport "${m[1]}:" (use docker://, oci:, oci-archive:, docker-archive: or dir:)`,
      );
    }
  }
  if (transport === 'docker') {
    if (name)
      throw new OciError(
        'INVALID_REFERENCE',
        `${quoteName(raw)}: a registry image keeps its own name; "=NAME" is for oci:, oci-archive: and docker-archive:`,
      );
    parseReference(rest);
    return { transport, target: rest, raw };
  }
  if (!rest)
    throw new OciError(
      'INVALID_REFERENCE',
      `${quoteName(raw)}: a path is required after ${transport}:`,
    );
  // dir: holds one image and no name: all of it is the path (as skopeo's dir:PATH)
  if (transport === 'dir') return { transport, target: rest, ...(name ? { name } : {}), raw };
  const colon = rest.indexOf(':');
  const target = colon >= 0 ? rest.slice(0, colon) : rest;
  const ref = colon >= 0 ? rest.slice(colon + 1) : undefined;
  return { transport, target, ...(ref ? { ref } : {}), ...(name ? { name } : {}), raw };
}

export async function openSource(
  spec: SourceSpec | string,
  ctx: TransportContext,
): Promise<ImageSource> {
  const s = typeof spec === 'string' ? parseSourceSpec(spec) : spec;
  switch (s.transport) {
    case 'docker': {
      const name = s.reference ?? parseReference(s.target);
      const conf = ctx.registriesConf ?? new RegistriesConf();
      return new DockerSource(
        s.raw,
        name,
        ctx.client,
        conf.pullSources(name, ctx.insecure === true),
      );
    }
    case 'oci':
      return LayoutSource.open(resolve(s.target), s.ref, s.raw, s.name);
    case 'oci-archive': {
      const { dir, remove } = await unpackArchive(resolve(s.target), s.raw);
      try {
        return await LayoutSource.open(dir, s.ref, s.raw, s.name, remove);
      } catch (err) {
        await remove();
        throw err;
      }
    }
    case 'dir':
      return DirSource.open(resolve(s.target), s.raw, s.name);
    case 'docker-archive':
      return DockerArchiveSource.open(resolve(s.target), s.ref, s.raw, s.name);
  }
}
