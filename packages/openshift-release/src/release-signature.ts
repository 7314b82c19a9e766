/**
 * OpenShift release signatures: the OpenPGP-signed "atomic container signature" documents the
 * cluster-version operator checks before it accepts an update (containers/image's "simple
 * signing" format), where they are found (a signature store: `<store>/sha256=<hex>/signature-N`,
 * N from 1), and how one is checked against a keyring (openpgp.js; no gpg binary).
 *
 * Not guaranteed: that the CVO trusts the keyring used here. The cluster checks the signature
 * against its own keys (Red Hat's for OCP releases); a factory keyring only catches a wrong or
 * damaged file before it travels.
 */
import { fileURLToPath } from 'node:url';
import { fetch } from 'undici';
import { Connections, connectionError, type ConnectionOptions } from '@offline-bundle/image-fetch';
import { OciError, isDigest } from '@offline-bundle/oci';
import { HostError, readSmallFile } from '@offline-bundle/host';

type OpenPgp = typeof import('openpgp');
let pgp: OpenPgp | undefined;
// openpgp.js is large and only `bundle create --release-signature` and `bundle cluster` use it.
const loadPgp = async (): Promise<OpenPgp> => (pgp ??= await import('openpgp'));

/** The signed payload's type, as containers/image writes it. */
const ATOMIC_SIGNATURE_TYPE = 'atomic container signature';
/** Most signatures read from a store for one digest (the CVO reads at most 10 per store as well). */
const MAX_STORE_SIGNATURES = 16;
/** A release signature file: Red Hat's are under 1 KiB. */
export const MAX_RELEASE_SIGNATURE_BYTES = 64 * 1024;
/** A keyring file: a few public keys. */
const MAX_RELEASE_KEYRING_BYTES = 1024 * 1024;
/**
 * What a signed message may decompress to: its payload is a JSON document of a few hundred
 * bytes. Without it a 200 KB compression bomb inflates to half a GiB in openpgp.js.
 */
const MAX_SIGNED_PAYLOAD_BYTES = 64 * 1024;

/** Reads a user-named signature or keyring file: regular files only, at most `max` bytes. */
export async function readReleaseFile(
  path: string,
  max: number,
  flag: string,
  code: 'SIGNATURE_NOT_FOUND' | 'INVALID_KEYRING' = 'SIGNATURE_NOT_FOUND',
): Promise<Buffer> {
  try {
    return (await readSmallFile(path, max)).bytes;
  } catch (err) {
    if (err instanceof HostError)
      throw new OciError(err.code, `${flag} ${err.message}`, { cause: err });
    throw new OciError(code, `cannot read ${flag} ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/** What a release signature says, read from its signed payload. */
interface ReleaseSignatureInfo {
  /** `critical.image.docker-manifest-digest`: the release image's manifest digest. */
  digest: string;
  /** `critical.identity.docker-reference`: the pull spec the signer named. */
  reference: string;
  /** OpenPGP key IDs (16 hex digits, lowercase) of the issuers. */
  keyIds: string[];
}

/** A keyring: the public keys release signatures may be made with. */
export interface ReleaseKeyring {
  source: string;
  /** Opaque openpgp.js keys. */
  keys: unknown[];
  /** Key IDs of every key and subkey (lowercase hex), for messages. */
  keyIds: string[];
}

/** The URL of signature N (from 1) of `digest` in the store at `store` (file:// or http(s)://). */
function signatureStoreUrl(store: string, digest: string, n: number): string {
  if (!isDigest(digest)) throw new OciError('INVALID_DIGEST', `${digest} is not a sha256 digest`);
  return `${store.replace(/\/+$/, '')}/sha256=${digest.slice('sha256:'.length)}/signature-${n}`;
}

async function readUrl(
  url: string,
  timeoutMs: number,
  connections: Connections,
): Promise<Buffer | undefined> {
  const u = new URL(url);
  if (u.protocol === 'file:') {
    try {
      return (await readSmallFile(fileURLToPath(u), MAX_RELEASE_SIGNATURE_BYTES)).bytes;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      if (err instanceof HostError)
        throw new OciError('BAD_RELEASE_SIGNATURE', `--signature-store ${err.message}`, {
          cause: err,
        });
      throw new OciError('SIGNATURE_NOT_FOUND', `cannot read ${url}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw new OciError(
      'INVALID_CONFIG',
      `--signature-store ${url} is neither file:// nor http(s)://`,
    );
  }
  let res: Awaited<ReturnType<typeof fetch>>;
  // the registry client's connections: the same proxy and certs.d rules as skopeo's
  const { dispatcher, tls } = await connections.get(u.host, false);
  try {
    res = await fetch(u, {
      signal: AbortSignal.timeout(timeoutMs),
      redirect: 'follow',
      dispatcher,
    });
  } catch (err) {
    const why = connectionError((err as { cause?: unknown }).cause ?? err, u.host, tls);
    throw new OciError(
      why.code,
      `cannot fetch ${url}: ${why.message}; check the URL or pass --release-signature FILE`,
      { cause: err },
    );
  }
  if (res.status === 404 || res.status === 403) return undefined; // object stores answer 403 for a missing key
  if (!res.ok)
    throw new OciError(
      'REGISTRY_ERROR',
      `${url} answered ${res.status}; try again or pass --release-signature FILE`,
    );
  const parts: Buffer[] = [];
  let n = 0;
  try {
    for await (const chunk of res.body ?? []) {
      n += (chunk as Uint8Array).length;
      if (n > MAX_RELEASE_SIGNATURE_BYTES)
        throw new OciError(
          'BAD_RELEASE_SIGNATURE',
          `${url} is over ${MAX_RELEASE_SIGNATURE_BYTES} bytes, larger than a signature can be`,
        );
      parts.push(Buffer.from(chunk as Uint8Array));
    }
  } catch (err) {
    await res.body?.cancel().catch(() => undefined);
    if (err instanceof OciError) throw err;
    throw new OciError(
      'REGISTRY_ERROR',
      `cannot read ${url}: ${(err as Error).message}; try again or pass --release-signature FILE`,
      { cause: err },
    );
  }
  return Buffer.concat(parts);
}

/**
 * Every signature the store holds for `digest`: signature-1, signature-2, … until the first
 * one missing. Throws SIGNATURE_NOT_FOUND when there is not even signature-1.
 */
export async function fetchStoreSignatures(
  store: string,
  digest: string,
  opts: { timeoutMs?: number; connection?: ConnectionOptions } = {},
): Promise<Buffer[]> {
  const out: Buffer[] = [];
  const connections = new Connections(opts.connection);
  try {
    for (let n = 1; n <= MAX_STORE_SIGNATURES; n++) {
      const body = await readUrl(
        signatureStoreUrl(store, digest, n),
        opts.timeoutMs ?? 30_000,
        connections,
      );
      if (!body) break;
      out.push(body);
    }
  } finally {
    await connections.close();
  }
  if (out.length === 0) {
    throw new OciError(
      'SIGNATURE_NOT_FOUND',
      `no signature for ${digest} at ${signatureStoreUrl(store, digest, 1)}: check --signature-store, or pass --release-signature FILE`,
    );
  }
  return out;
}

/** Reads a keyring file: armored or binary OpenPGP public keys (one or more). */
export async function loadReleaseKeyring(path: string): Promise<ReleaseKeyring> {
  const { readKeys } = await loadPgp();
  const bytes = await readReleaseFile(
    path,
    MAX_RELEASE_KEYRING_BYTES,
    '--release-keyring',
    'INVALID_KEYRING',
  );
  try {
    const text = bytes.toString('utf8');
    const keys = text.includes('-----BEGIN PGP PUBLIC KEY BLOCK-----')
      ? await readKeys({ armoredKeys: text })
      : await readKeys({ binaryKeys: bytes });
    const keyIds = keys.flatMap((k) => k.getKeyIDs().map((id) => id.toHex()));
    return { source: path, keys, keyIds };
  } catch (err) {
    throw new OciError(
      'INVALID_KEYRING',
      `${path} holds no OpenPGP public keys (${(err as Error).message}): export them with "gpg --export" or "gpg --export --armor"`,
      { cause: err },
    );
  }
}

interface Opened {
  data: Uint8Array;
  signatures: { keyID: { toHex(): string }; verified: Promise<unknown> }[];
}

async function openMessage(
  bytes: Uint8Array,
  where: string,
  verificationKeys: unknown[],
): Promise<Opened> {
  const { readMessage, verify } = await loadPgp();
  try {
    const text = Buffer.from(bytes).toString('latin1');
    const config = { maxDecompressedMessageSize: MAX_SIGNED_PAYLOAD_BYTES };
    const message = text.startsWith('-----BEGIN PGP MESSAGE-----')
      ? await readMessage({ armoredMessage: text, config })
      : await readMessage({ binaryMessage: bytes, config });
    const r = await verify({
      message,
      verificationKeys: verificationKeys as never,
      format: 'binary',
      config,
    });
    return r as unknown as Opened;
  } catch (err) {
    throw new OciError(
      'BAD_RELEASE_SIGNATURE',
      `${where} is not an OpenPGP signed message (${(err as Error).message}): a release signature is the signature-N file of a signature store`,
      { cause: err },
    );
  }
}

function payload(data: Uint8Array, where: string): { digest: string; reference: string } {
  let doc: {
    critical?: {
      type?: unknown;
      image?: { 'docker-manifest-digest'?: unknown };
      identity?: { 'docker-reference'?: unknown };
    };
  };
  try {
    doc = JSON.parse(Buffer.from(data).toString('utf8'));
  } catch (err) {
    throw new OciError(
      'BAD_RELEASE_SIGNATURE',
      `${where} does not sign a JSON document: not a release signature`,
      { cause: err },
    );
  }
  const c = doc?.critical;
  const digest = c?.image?.['docker-manifest-digest'];
  const reference = c?.identity?.['docker-reference'];
  if (
    c?.type !== ATOMIC_SIGNATURE_TYPE ||
    typeof digest !== 'string' ||
    !isDigest(digest) ||
    typeof reference !== 'string'
  ) {
    throw new OciError(
      'BAD_RELEASE_SIGNATURE',
      `${where} does not sign an "${ATOMIC_SIGNATURE_TYPE}" (critical.type, critical.image.docker-manifest-digest, critical.identity.docker-reference): not a release signature`,
    );
  }
  return { digest, reference };
}

/** What a signature claims, without checking it against any key. */
export async function readReleaseSignature(
  bytes: Uint8Array,
  where = 'the release signature',
): Promise<ReleaseSignatureInfo> {
  const m = await openMessage(bytes, where, []);
  return { ...payload(m.data, where), keyIds: Array.from(m.signatures, (s) => s.keyID.toHex()) };
}

/**
 * Checks a release signature: an OpenPGP signed message over an atomic container signature
 * whose docker-manifest-digest is `digest`, and, with a keyring, made by one of its keys.
 * Returns what it says. BAD_RELEASE_SIGNATURE or UNTRUSTED_RELEASE_SIGNATURE otherwise.
 */
export async function verifyReleaseSignature(
  bytes: Uint8Array,
  digest: string,
  opts: { keyring?: ReleaseKeyring; where?: string } = {},
): Promise<ReleaseSignatureInfo> {
  const where = opts.where ?? 'the release signature';
  const m = await openMessage(bytes, where, opts.keyring?.keys ?? []);
  const info = {
    ...payload(m.data, where),
    keyIds: Array.from(m.signatures, (s) => s.keyID.toHex()),
  };
  if (info.digest !== digest) {
    throw new OciError(
      'BAD_RELEASE_SIGNATURE',
      `${where} signs ${info.digest}, not this release (${digest}): take the signature of this release image`,
    );
  }
  if (!opts.keyring) return info;
  const known = new Set(opts.keyring.keyIds);
  const ours = m.signatures.filter((s) => known.has(s.keyID.toHex()));
  if (ours.length === 0) {
    throw new OciError(
      'UNTRUSTED_RELEASE_SIGNATURE',
      `${where} is signed by key ${info.keyIds.join(', ') || 'unknown'}, which is not in ${opts.keyring.source} (keys ${opts.keyring.keyIds.join(', ')}): use the release's own keyring, or the signature its publisher made`,
    );
  }
  for (const s of ours) {
    try {
      await s.verified;
      return info;
    } catch {
      // try the next signature by a known key
    }
  }
  throw new OciError(
    'BAD_RELEASE_SIGNATURE',
    `${where} does not verify with key ${ours.map((s) => s.keyID.toHex()).join(', ')} of ${opts.keyring.source}: the file was altered or damaged; fetch it again`,
  );
}
