import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { OciError } from '@offline-bundle/oci';
import { readSmallFile } from '@offline-bundle/host';

/** A PEM file in a certs.d directory: a CA bundle or a client certificate or key is far below this. */
export const MAX_CERT_FILE_BYTES = 1024 * 1024;

export interface CertDirOptions {
  /** --cert-dir: one directory for every registry, instead of the per-host lookup. */
  certDir?: string;
  /** Prefix of /etc/containers and /etc/docker (containers/image's RootForImplicitAbsolutePaths). */
  systemRoot?: string;
  /** $HOME, for ~/.config/containers/certs.d. */
  home?: string;
}

/** What a certs.d directory adds to the TLS of one registry. */
export interface HostTls {
  /** The directory read, for messages. */
  dir: string;
  /** Extra CAs (*.crt), trusted besides the system's. */
  ca: string[];
  /** A client certificate (*.cert) and its key (*.key, same base name). */
  cert?: string;
  key?: string;
}

/**
 * The directory containers/image reads for `hostPort`: --cert-dir, else the first of
 * ~/.config/containers/certs.d/HOST[:PORT], /etc/containers/certs.d/…, /etc/docker/certs.d/…
 * that exists; undefined when none does.
 */
export async function certDirFor(
  hostPort: string,
  opts: CertDirOptions,
): Promise<string | undefined> {
  if (opts.certDir) return opts.certDir;
  const root = opts.systemRoot ?? '/';
  const bases = [
    ...(opts.home ? [join(opts.home, '.config', 'containers', 'certs.d')] : []),
    join(root, 'etc', 'containers', 'certs.d'),
    join(root, 'etc', 'docker', 'certs.d'),
  ];
  for (const base of bases) {
    const dir = join(base, hostPort);
    const st = await stat(dir).catch(() => undefined);
    if (st?.isDirectory()) return dir;
  }
  return undefined;
}

async function pem(path: string): Promise<string> {
  try {
    return (await readSmallFile(path, MAX_CERT_FILE_BYTES)).bytes.toString('utf8');
  } catch (cause) {
    throw new OciError('INVALID_CONFIG', `cannot read ${path}: ${(cause as Error).message}`, {
      cause,
    });
  }
}

/**
 * Reads a certs.d directory as containers/image does (containers-certs.d(5)): every `*.crt` is
 * a CA, every `*.cert` a client certificate whose key is the `*.key` of the same name.
 */
export async function readCertDir(dir: string): Promise<HostTls> {
  let names: string[];
  try {
    names = (await readdir(dir)).sort();
  } catch (cause) {
    throw new OciError(
      'INVALID_CONFIG',
      `cannot read certificate directory ${dir}: ${(cause as Error).message}`,
      { cause },
    );
  }
  const tls: HostTls = { dir, ca: [] };
  for (const name of names) {
    if (name.endsWith('.crt')) tls.ca.push(await pem(join(dir, name)));
    else if (name.endsWith('.cert')) {
      const keyName = `${name.slice(0, -'.cert'.length)}.key`;
      if (!names.includes(keyName))
        throw new OciError(
          'INVALID_CONFIG',
          `${join(dir, name)} is a client certificate without its key ${keyName} (a CA certificate must end in .crt)`,
        );
      if (tls.cert)
        throw new OciError(
          'INVALID_CONFIG',
          `${dir} holds more than one client certificate (*.cert): keep one`,
        );
      tls.cert = await pem(join(dir, name));
      tls.key = await pem(join(dir, keyName));
    } else if (name.endsWith('.key') && !names.includes(`${name.slice(0, -'.key'.length)}.cert`)) {
      throw new OciError(
        'INVALID_CONFIG',
        `${join(dir, name)} is a key without its client certificate ${name.slice(0, -'.key'.length)}.cert`,
      );
    }
  }
  return tls;
}
