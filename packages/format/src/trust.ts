import { unsafePermissions } from '@offline-bundle/host';
import { FormatError } from './errors.js';
import { algorithmOf, readPublicKey, verifyBytes, type TrustedKey } from './keys.js';
import type { BundleManifest } from './manifest.js';

/** What the verifier trusts: public keys and/or the whole file's expected digest. */
export interface Trust {
  keys?: TrustedKey[];
  digest?: string;
}

export function assertTrust(trust: Trust): void {
  if (!trust.keys?.length && !trust.digest) {
    throw new FormatError(
      'NO_TRUST',
      "nothing to verify against: pass --key PUB (the factory's public key) and/or --digest sha256:HEX",
    );
  }
}

/**
 * Checks the detached signature against the trusted keys. Returns the key that verified,
 * or undefined when no keys are configured (digest-only trust, checked at the end of the pass).
 */
export function checkSignature(
  manifestBytes: Uint8Array,
  signature: Uint8Array,
  claimedFingerprint: string | undefined,
  trust: Trust,
): TrustedKey | undefined {
  const keys = trust.keys ?? [];
  if (keys.length === 0) return undefined;
  for (const k of keys) if (verifyBytes(manifestBytes, signature, k.key)) return k;
  const claimed = keys.find((k) => k.fingerprint === claimedFingerprint);
  if (claimed) {
    throw new FormatError(
      'BAD_SIGNATURE',
      `the signature does not match bundle.json for trusted key ${claimed.source}: the bundle was altered after signing; get a fresh copy from the factory`,
    );
  }
  throw new FormatError(
    'UNTRUSTED_KEY',
    `bundle.json is signed by key ${claimedFingerprint ?? 'unknown'}, which is not among the trusted keys (${keys.map((k) => k.source).join(', ')}): install the factory's public key or get a bundle signed with a trusted one`,
  );
}

/**
 * bundle.json's `signer` must name the key that verified it: the agent reports the signer
 * from there, so a signed statement naming another key (another trusted one, or none at all)
 * would put a false identity in the cluster's records.
 */
export function checkSigner(manifest: BundleManifest, verifiedBy: TrustedKey): void {
  const { fingerprint, algorithm } = manifest.signer;
  if (fingerprint !== verifiedBy.fingerprint || algorithm !== algorithmOf(verifiedBy.key)) {
    throw new FormatError(
      'BAD_SIGNATURE',
      `bundle.json names signer ${fingerprint} (${algorithm}) but was signed by trusted key ${verifiedBy.source} (${verifiedBy.fingerprint}): the bundle was built or altered wrongly; rebuild it with bundle create`,
    );
  }
}

export interface LoadTrustOptions {
  /**
   * A key file that someone other than root or this user could change (its mode, owner or a
   * directory above it): refused by default (the agent), or passed to this function to warn
   * (the factory CLI, where keys sit in people's home directories).
   */
  onUnsafeKey?: 'refuse' | ((message: string) => void);
}

/** Trust from key files and/or an expected whole-file digest (what the CLIs and the agent take). */
export async function loadTrust(
  keyPaths: readonly string[],
  digest?: string,
  opts: LoadTrustOptions = {},
): Promise<Trust> {
  const keys = await Promise.all(
    keyPaths.map(async (path) => {
      const { trusted, stats } = await readPublicKey(path);
      const unsafe = await unsafePermissions(path, stats);
      if (unsafe && typeof opts.onUnsafeKey === 'function')
        opts.onUnsafeKey(`trusted key ${unsafe}`);
      else if (unsafe) throw new FormatError('UNSAFE_PERMISSIONS', `trusted key ${unsafe}`);
      return trusted;
    }),
  );
  return {
    ...(keys.length ? { keys } : {}),
    ...(digest ? { digest } : {}),
  };
}
