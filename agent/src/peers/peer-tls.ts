// The peer network's credentials: a CA only the cluster's nodes have a certificate of, and
// this node's certificate and key. Access, not integrity: every byte a peer sends is held to
// the signed bundle.json anyway; the certificate keeps pods and other machines on the network
// from reading bundles (or loading a node's uplink) at all.
import { lstat } from 'node:fs/promises';
import type { SecureContextOptions } from 'node:tls';
import { readSmallFile, unsafePermissions } from '@offline-bundle/host';
import { AgentError, oneLine } from '../errors.js';

/** Largest PEM file read for the peer credentials: a chain of a few certificates. */
export const MAX_PEER_PEM_BYTES = 64 * 1024;

interface PeerTlsPaths {
  /** PEM: the peer CA, the only issuer a peer's certificate may chain to. */
  ca: string;
  /** PEM: this node's certificate (serverAuth and clientAuth), issued by the peer CA. */
  cert: string;
  /** PEM: its private key, readable by root only. */
  key: string;
}

export interface PeerCredentials {
  ca: Buffer;
  cert: Buffer;
  key: Buffer;
}

async function readPem(path: string, what: string, secret: boolean): Promise<Buffer> {
  let file;
  try {
    file = await readSmallFile(path, MAX_PEER_PEM_BYTES);
  } catch (err) {
    throw new AgentError(
      'InvalidConfig',
      `cannot read the peer ${what} ${path}: ${(err as Error).message}; set peers.${what} (deploy/openshift/peer-ca.mjs writes it)`,
    );
  }
  const unsafe = await unsafePermissions(path, file.stats);
  if (unsafe) throw new AgentError('InvalidConfig', `peer ${what} ${unsafe}`);
  // anyone who reads the key can fetch every bundle the cluster holds
  if (secret && (file.stats.mode & 0o077) !== 0) {
    throw new AgentError(
      'InvalidConfig',
      `peer key ${path} is readable by others (mode ${(file.stats.mode & 0o777).toString(8)}): chmod 600 ${path}`,
    );
  }
  if (!file.bytes.includes('-----BEGIN '))
    throw new AgentError(
      'InvalidConfig',
      `peer ${what} ${path} is not PEM: give the file deploy/openshift/peer-ca.mjs wrote`,
    );
  return file.bytes;
}

/** Reads and checks the three files (their permissions as for trusted keys; the key root-only). */
export async function loadPeerCredentials(paths: PeerTlsPaths): Promise<PeerCredentials> {
  const [ca, cert, key] = await Promise.all([
    readPem(paths.ca, 'ca', false),
    readPem(paths.cert, 'cert', false),
    readPem(paths.key, 'key', true),
  ]);
  return { ca, cert, key };
}

/** Why the peers stay inert for their credentials: none installed (a default install), or files that cannot be used. */
interface PeerKeysProblem {
  reason: 'NoPeerCredentials' | 'PeerCredentialsInvalid';
  message: string;
}

const INERT =
  'this node opens no peer port (never one without mutual TLS) and fetches nothing from other nodes';

/**
 * The peer credentials, or why there are none to use. Peers are on by default, so a node whose
 * admin never made the keys is the ordinary case, told apart from keys that are there but wrong.
 */
export async function readPeerKeys(
  paths: PeerTlsPaths,
): Promise<{ credentials: PeerCredentials } | PeerKeysProblem> {
  try {
    return { credentials: await loadPeerCredentials(paths) };
  } catch (err) {
    const files = [paths.ca, paths.cert, paths.key];
    const gone = await Promise.all(
      files.map((f) =>
        lstat(f).then(
          () => false,
          (e: NodeJS.ErrnoException) => e.code === 'ENOENT',
        ),
      ),
    );
    const missing = files.filter((_, i) => gone[i]);
    if (missing.length) {
      return {
        reason: 'NoPeerCredentials',
        message: `the peer keys are not installed (${missing.join(', ')} missing): ${INERT}; make them with deploy/openshift/peer-ca.mjs and install them on every node (docs/peers.md), or set peers.enabled: false`,
      };
    }
    return { reason: 'PeerCredentialsInvalid', message: `${oneLine(err)}; until then ${INERT}` };
  }
}

/**
 * TLS options both ends share: the peer CA replaces the system's roots (a certificate from a
 * public CA opens nothing here), TLS 1.3 only.
 */
export function peerTlsOptions(
  c: PeerCredentials,
): SecureContextOptions & { minVersion: 'TLSv1.3' } {
  return { ca: c.ca, cert: c.cert, key: c.key, minVersion: 'TLSv1.3' };
}

/**
 * A peer is any holder of a certificate from the peer CA: nodes share one (see SECURITY.md),
 * so the name in it cannot be a node's address; the chain is what is checked.
 */
export function anyPeerIdentity(): undefined {
  return undefined;
}
