import { createHash, type Hash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { quoteName } from '@offline-bundle/host';
import { OciError } from './errors.js';

const DIGEST_RE = /^sha256:[a-f0-9]{64}$/;

export function isDigest(value: string): boolean {
  return DIGEST_RE.test(value);
}

/** Only sha256 is accepted: it is what every registry and CRI-O use, and it keeps paths predictable. */
export function assertDigest(value: string, what = 'digest'): string {
  if (!DIGEST_RE.test(value)) {
    throw new OciError(
      'INVALID_DIGEST',
      `${what} ${quoteName(value)} is not a sha256 digest (sha256:<64 hex>)`,
    );
  }
  return value;
}

export function digestHex(digest: string): string {
  return assertDigest(digest).slice('sha256:'.length);
}

export function sha256(data: Uint8Array | string): string {
  return 'sha256:' + createHash('sha256').update(data).digest('hex');
}

export function newSha256(): Hash {
  return createHash('sha256');
}

export async function sha256File(path: string): Promise<{ digest: string; size: number }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(path)) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { digest: 'sha256:' + hash.digest('hex'), size };
}
