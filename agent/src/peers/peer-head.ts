// The first thing a node fetches from its peers: bundle.json and its signature, held to the
// approval's digest and to this node's pinned keys before a single blob is asked for. A peer
// that serves another bundle under the approved name, or a signature that does not verify, is
// suspect and the next peer is asked; a bundle whose own signature names an untrusted key is
// refused outright (no peer can change that without changing the digest).
import {
  bundleIdentity,
  checkSignature,
  checkSigner,
  FormatError,
  MAX_BUNDLE_JSON_BYTES,
  MAX_SIGNATURE_BYTES,
  parseManifestBytes,
  type BundleManifest,
  type TrustedKey,
  type Trust,
} from '@offline-bundle/format';
import { AgentError, oneLine } from '../errors.js';
import type { PeerCounters } from './peer-counters.js';
import { PeerFault, type PeerClient } from './peer-client.js';
import type { PeerApproval, PeerEndpoint } from './types.js';

export interface PeerHead {
  manifest: BundleManifest;
  manifestBytes: Buffer;
  signature: Buffer;
  signer: TrustedKey;
}

export const bundleUrl = (peer: PeerEndpoint, digest: string) => `${peer.url}/v1/bundles/${digest}`;

/**
 * bundle.json as `peer` serves it, verified: its digest the approval's, its signature one of
 * `trust`'s keys. A PeerFault when the peer is to blame, an AgentError when the bundle is.
 */
async function headFrom(
  peer: PeerEndpoint,
  approval: PeerApproval,
  trust: Trust,
  client: PeerClient,
  signal: AbortSignal,
): Promise<PeerHead> {
  const base = bundleUrl(peer, approval.manifestDigest);
  const manifestBytes = await client.small(`${base}/bundle.json`, MAX_BUNDLE_JSON_BYTES, signal);
  if (bundleIdentity(manifestBytes) !== approval.manifestDigest) {
    throw new PeerFault(
      'refused',
      `${peer.node} served a bundle.json that hashes to ${bundleIdentity(manifestBytes)}, not the approved ${approval.manifestDigest}`,
    );
  }
  const signature = await client.small(`${base}/signature`, MAX_SIGNATURE_BYTES, signal);
  let manifest: BundleManifest;
  try {
    manifest = parseManifestBytes(manifestBytes);
  } catch (err) {
    throw new AgentError(
      'Corrupt',
      `the approved bundle ${approval.manifestDigest} has an invalid bundle.json (${oneLine(err)}): approve a bundle built by bundle create`,
      { cause: err },
    );
  }
  let signer: TrustedKey;
  try {
    signer = checkSignature(manifestBytes, signature, manifest.signer.fingerprint, trust)!;
    checkSigner(manifest, signer);
  } catch (err) {
    // the signature bytes are the peer's word: another peer may hold the right ones
    if (err instanceof FormatError && err.code === 'BAD_SIGNATURE')
      throw new PeerFault('refused', `${peer.node}: ${err.message}`, 0, { cause: err });
    throw new AgentError(
      'UntrustedKey',
      `the approved bundle ${manifest.release.version} (${approval.manifestDigest}): ${oneLine(err)}`,
      { cause: err },
    );
  }
  // approval.signer is shown to people only: an approval by digest names the admin's first key,
  // not necessarily the signer; this node's own pinned keys decide
  return { manifest, manifestBytes, signature, signer };
}

/**
 * The verified head from the first peer that serves it right. Needs pinned keys: a digest
 * alone vouches for nothing of a bundle that is never read whole from a stick here.
 */
export async function fetchHead(
  approval: PeerApproval,
  peers: PeerEndpoint[],
  trust: Trust,
  client: PeerClient,
  counters: PeerCounters,
  signal: AbortSignal,
): Promise<{ head: PeerHead; from: PeerEndpoint }> {
  if (!trust.keys?.length)
    throw new AgentError(
      'NoTrust',
      "fetching from peers needs trust.keys (the factory's public keys) in the agent's config: a digest alone cannot vouch for a bundle fetched piece by piece",
    );
  const why: string[] = [];
  for (const peer of peers) {
    if (counters.suspect.has(peer.node)) continue;
    try {
      return { head: await headFrom(peer, approval, trust, client, signal), from: peer };
    } catch (err) {
      signal.throwIfAborted();
      if (!(err instanceof PeerFault)) throw err;
      if (err.kind === 'refused') counters.suspect.add(peer.node);
      why.push(`${peer.node}: ${err.message}`);
    }
  }
  const allSuspect = peers.length > 0 && peers.every((p) => counters.suspect.has(p.node));
  if (allSuspect)
    throw new AgentError(
      'PeersSuspect',
      `every peer holding ${approval.manifestDigest} served a wrong bundle.json or signature (${why.join('; ')}): check those nodes, or bring the bundle on a stick`,
    );
  throw new AgentError(
    'NoPeerHasBundle',
    `no peer served bundle ${approval.version} (${approval.manifestDigest})${why.length ? `: ${why.join('; ')}` : ''}; wait for a node that holds it, or bring it on a stick`,
  );
}
