import { createReadStream, createWriteStream } from 'node:fs';
import { rename, rm, stat } from 'node:fs/promises';
import { makeDirs } from './make-dirs.js';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import { digestHex, newSha256, sha256 } from './digest.js';
import { writeFileAtomic } from './atomic-file.js';
import { OciError } from './errors.js';
import { withRetry } from './retry.js';

export interface CacheFetchOptions {
  /** Called with each chunk's length as it lands (for progress). */
  onBytes?: (n: number) => void;
  attempts?: number;
}

/**
 * A content-addressed blob store (`blobs/sha256/<hex>`). Downloads land in `<hex>.partial`
 * and resume from its length after an interruption, even in a later run; a blob becomes
 * visible under its digest only after its size and digest were checked. Not safe for two
 * processes filling the same cache at once.
 */
export class BlobCache {
  /**
   * Work in progress per digest: two images in one run often need the same blob at once (a
   * tag and a digest reference of one image, payload components sharing an image), and two
   * writers of one .partial or .tmp file corrupt it or lose the rename race.
   */
  private readonly inflight = new Map<string, Promise<string>>();

  constructor(readonly dir: string) {}

  private once(digest: string, work: () => Promise<string>): Promise<string> {
    const running = this.inflight.get(digest);
    if (running) return running;
    const p = work().finally(() => this.inflight.delete(digest));
    this.inflight.set(digest, p);
    return p;
  }

  path(digest: string): string {
    return join(this.dir, 'blobs', 'sha256', digestHex(digest));
  }

  async has(digest: string, size: number): Promise<boolean> {
    try {
      return (await stat(this.path(digest))).size === size;
    } catch {
      return false;
    }
  }

  async putBytes(digest: string, bytes: Uint8Array): Promise<string> {
    const actual = sha256(bytes);
    if (actual !== digest) throw new OciError('DIGEST_MISMATCH', `content hashes to ${actual}, expected ${digest}`);
    return this.once(digest, () => this.putNow(digest, bytes));
  }

  private async putNow(digest: string, bytes: Uint8Array): Promise<string> {
    const final = this.path(digest);
    if (await this.has(digest, bytes.length)) return final;
    await makeDirs(join(this.dir, 'blobs', 'sha256'));
    await writeFileAtomic(final, bytes);
    return final;
  }

  /** Fetches a blob through `open(offset)` unless the cache holds it; returns its path. */
  async fetch(digest: string, size: number, open: (offset: number) => Promise<Readable>, opts: CacheFetchOptions = {}): Promise<string> {
    const running = this.inflight.get(digest);
    if (running) {
      const path = await running;
      opts.onBytes?.(size);
      return path;
    }
    return this.once(digest, () => this.fetchNow(digest, size, open, opts));
  }

  private async fetchNow(digest: string, size: number, open: (offset: number) => Promise<Readable>, opts: CacheFetchOptions): Promise<string> {
    const final = this.path(digest);
    if (await this.has(digest, size)) {
      opts.onBytes?.(size);
      return final;
    }
    await makeDirs(join(this.dir, 'blobs', 'sha256'));
    const partial = `${final}.partial`;
    let reported = 0;
    const report = (n: number) => {
      reported += n;
      opts.onBytes?.(n);
    };
    await withRetry(async () => {
      // Re-hash what is on disk each attempt: after a failed write the hash state and the file may disagree.
      const hash = newSha256();
      let have = 0;
      try {
        for await (const chunk of createReadStream(partial)) {
          hash.update(chunk as Buffer);
          have += (chunk as Buffer).length;
        }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
      if (have > size) {
        await rm(partial, { force: true });
        have = 0;
        hash.destroy();
        return this.fetchNow(digest, size, open, opts);
      }
      if (have > reported) report(have - reported);
      let written = have;
      if (have < size) {
        const src = await open(have);
        const counter = new Transform({
          transform(chunk: Buffer, _enc, cb) {
            written += chunk.length;
            if (written > size) return cb(new OciError('SIZE_MISMATCH', `blob ${digest} is larger than its ${size} bytes`));
            hash.update(chunk);
            report(chunk.length);
            cb(null, chunk);
          },
        });
        await pipeline(src, counter, createWriteStream(partial, { flags: 'a' }));
      }
      if (written !== size) throw new OciError('SIZE_MISMATCH', `blob ${digest} ended after ${written} of ${size} bytes`);
      const actual = 'sha256:' + hash.digest('hex');
      if (actual !== digest) {
        await rm(partial, { force: true });
        throw new OciError('DIGEST_MISMATCH', `blob ${digest} downloaded with digest ${actual}`);
      }
      await rename(partial, final);
      return final;
    }, {
      attempts: opts.attempts ?? 5,
      // A short read or a dropped connection resumes; a wrong digest or refusal does not.
      retryable: (err) => !(err instanceof OciError) || err.code === 'NETWORK_ERROR' || err.code === 'REGISTRY_ERROR' || (err.code === 'SIZE_MISMATCH' && /ended after/.test(err.message)),
    });
    return final;
  }
}
