// The metrics listener's serving certificate: the one the site names (the kubelet's serving
// certificate, which the cluster's Prometheus already trusts), else one the agent makes itself
// and keeps in its state directory (Prometheus then needs it as ca_file, or insecureSkipVerify).
// Every loader is called again at each reload, so a rotated, renewed or fixed file is picked up.
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readSmallFile, unsafePermissions, writeFileAtomic } from '@offline-bundle/host';
import type { ServingTls } from './metrics-listener.js';
import { makeSelfSigned, stillGood } from './self-signed.js';

/** A PEM certificate chain or key read for the listener. */
export const MAX_SERVING_PEM_BYTES = 64 * 1024;
/** Under the state directory: the generated certificate and key. */
export const SELF_SIGNED_DIR = 'metrics-tls';

type PemKind = 'cert' | 'key' | 'clientCA';

async function readPem(path: string, what: PemKind): Promise<Buffer> {
  let file;
  try {
    file = await readSmallFile(path, MAX_SERVING_PEM_BYTES);
  } catch (err) {
    const fix =
      what === 'clientCA'
        ? 'fix metrics.clientCA or leave it out'
        : `set metrics.${what}, or leave metrics.cert and metrics.key out for a self-signed certificate`;
    throw Object.assign(
      new Error(
        `cannot read the metrics ${what} ${path}: ${(err as Error).message.split('\n')[0]}; ${fix}`,
        { cause: err },
      ),
      { code: (err as NodeJS.ErrnoException).code },
    );
  }
  // whoever can write the client CA can mint any identity (O system:masters): as guarded as the key
  const unsafe = await unsafePermissions(path, file.stats);
  if (unsafe) throw new Error(`metrics ${what} ${unsafe}`);
  if (what === 'key' && (file.stats.mode & 0o077) !== 0)
    throw new Error(
      `metrics key ${path} is readable by others (mode ${(file.stats.mode & 0o777).toString(8)}): chmod 600 ${path}`,
    );
  const marker =
    what === 'key' ? /-----BEGIN [A-Z ]*PRIVATE KEY-----/ : /-----BEGIN CERTIFICATE-----/;
  if (!marker.test(file.bytes.toString('latin1')))
    throw new Error(
      `metrics ${what} ${path} holds no PEM ${what === 'key' ? 'private key' : 'certificate'}`,
    );
  return file.bytes;
}

/** The CA of metrics.clientCA, checked as the key is (owner, mode, PEM); read again at each reload. */
export function readClientCa(path: string): Promise<Buffer> {
  return readPem(path, 'clientCA');
}

/** The site's certificate and key (one file may hold both, as the kubelet's kubelet-server-current.pem). */
export function fileServingTls(cert: string, key: string): () => Promise<ServingTls> {
  return async () => ({ cert: await readPem(cert, 'cert'), key: await readPem(key, 'key') });
}

/** Whether `key` is the private key of `cert`'s (first) certificate. */
export function keyMatches(cert: string | Buffer, key: string | Buffer): boolean {
  try {
    return new X509Certificate(cert).checkPrivateKey(createPrivateKey(key));
  } catch {
    return false;
  }
}

/**
 * The generated certificate for `names` in `stateDir`/metrics-tls: made when missing, no longer
 * naming the address, within RENEW_BEFORE_MS of its end, or not matching its key (a crash
 * between the two writes); else the one kept (Prometheus keeps trusting it). `load` checks the
 * same each time it is called, so a daemon running for a year renews it in time.
 */
export async function selfSignedServingTls(
  stateDir: string,
  names: string[],
  commonName: string,
  onMade?: (certFile: string) => void,
): Promise<{ load: () => Promise<ServingTls>; certFile: string; made: boolean }> {
  const dir = join(stateDir, SELF_SIGNED_DIR);
  const certFile = join(dir, 'tls.crt');
  const keyFile = join(dir, 'tls.key');
  const read = fileServingTls(certFile, keyFile);
  const ensure = async (): Promise<boolean> => {
    const cert = await readFile(certFile).catch(() => undefined);
    const key = await readFile(keyFile).catch(() => undefined);
    if (cert && key && stillGood(cert, names) && keyMatches(cert, key)) return false;
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const made = makeSelfSigned(names, commonName);
    await writeFileAtomic(keyFile, made.key, 0o600);
    await writeFileAtomic(certFile, made.cert, 0o644);
    return true;
  };
  const made = await ensure();
  const load = async () => {
    if (await ensure()) onMade?.(certFile);
    return read();
  };
  return { load, certFile, made };
}

/**
 * The site's certificate while its files exist, else the self-signed one (`fallback`): a
 * DaemonSet config naming one distribution's kubelet paths still serves on another. Only a
 * missing file falls back; a file that is there but unsafe or no PEM stays an error.
 * `onSwitch` is told each time the choice changes (so it is logged once, not every reload).
 */
export function siteOrSelfSigned(
  site: () => Promise<ServingTls>,
  fallback: () => Promise<() => Promise<ServingTls>>,
  onSwitch: (selfSigned: boolean, why: string) => void,
): () => Promise<ServingTls> {
  let usingFallback: boolean | undefined;
  let own: (() => Promise<ServingTls>) | undefined;
  return async () => {
    try {
      const t = await site();
      if (usingFallback !== false) {
        if (usingFallback) onSwitch(false, 'the configured certificate is there again');
        usingFallback = false;
      }
      return t;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      own ??= await fallback();
      if (usingFallback !== true) onSwitch(true, (err as Error).message.split(';')[0]!);
      usingFallback = true;
      return own();
    }
  };
}
