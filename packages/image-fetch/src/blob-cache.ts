import { createReadStream } from 'node:fs';
import { readdir, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  makeDirs,
  pidExists,
  readSmallFile,
  replaceFile,
  writeFileAtomic,
} from '@offline-bundle/host';
import { digestHex, newSha256, sha256, OciError } from '@offline-bundle/oci';
import { BatchedAppend } from './batched-append.js';
import { withRetry } from './retry.js';
import { UnpackedCounter } from './unpacked-size.js';

export interface CacheFetchOptions {
  /** Called with each chunk's length as it lands (for progress). */
  onBytes?: (n: number) => void;
  attempts?: number;
  /** Count what the blob (a compressed layer) unpacks to as it arrives, and keep the figure beside it. */
  measure?: boolean;
  /**
   * Something else worked out from the bytes as they arrive (the chunks the digest check sees, a
   * resumed download's .partial first): a fresh one each attempt, finished only once the digest
   * matched. Not called for a blob the cache holds already.
   */
  tap?: () => BlobTap;
}

/** What a fetch feeds its bytes to besides the digest check (CacheFetchOptions.tap). */
interface BlobTap {
  push(chunk: Buffer): Promise<void>;
  /** Every byte was pushed and the blob is stored under its digest. */
  finish(): Promise<void>;
  abandon(): void;
}

interface CacheInfo {
  dir: string;
  blobs: number;
  bytes: number;
  /** Unfinished downloads (resumed by the next run) and leftover temp files. */
  partial: number;
  partialBytes: number;
}

/**
 * Unpacked sizes, under a directory named for how they were measured: figures from an older,
 * looser measure (for a day, v1 trusted gzip trailers, which a 4 GiB wrap or a member before the
 * last can cut) are not read again.
 */
const SIZES = ['sizes', 'v2', 'sha256'];
const LEGACY_SIZES = ['sizes', 'sha256'];
/** Other facts about a blob, kept by those who work them out (BlobCache.keepFact): `facts/<kind>/sha256/<hex>`. */
const FACTS = 'facts';

/** Every file that holds a fact about blob `hex`: its unpacked sizes and each kind under FACTS. */
async function factFiles(dir: string, hex: string): Promise<string[]> {
  const kinds = await readdir(join(dir, FACTS)).catch(() => [] as string[]);
  return [
    ...[SIZES, LEGACY_SIZES].map((sizes) => join(dir, ...sizes, hex)),
    ...kinds.map((k) => join(dir, FACTS, k, 'sha256', hex)),
  ];
}

const isFull = (err: unknown) =>
  ['ENOSPC', 'EDQUOT'].includes((err as NodeJS.ErrnoException)?.code ?? '');

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
  /** Blobs this process hashed against their digest as it stored them, or compared byte for byte with bytes it had (putBytes). */
  private readonly checked = new Set<string>();

  /** `signal` (Ctrl-C) stops downloads in flight and their retries; what arrived stays in .partial for the next run. */
  constructor(
    readonly dir: string,
    private readonly signal?: AbortSignal,
  ) {}

  private once(digest: string, work: () => Promise<string>): Promise<string> {
    const running = this.inflight.get(digest);
    if (running) return running;
    const p = work().finally(() => this.inflight.delete(digest));
    this.inflight.set(digest, p);
    return p;
  }

  /**
   * Whether this process stored `digest` itself, hashed as it arrived (or, by putBytes, found it
   * holding exactly the bytes it had): its file needs no second hash in this run. A blob the
   * fetch found in the cache (checked by size only) is not.
   */
  verified(digest: string): boolean {
    return this.checked.has(digest);
  }

  path(digest: string): string {
    return join(this.dir, 'blobs', 'sha256', digestHex(digest));
  }

  /** Where the unpacked size of a layer is kept (a decimal number): cached runs know it too. */
  private sizePath(digest: string): string {
    return join(this.dir, ...SIZES, digestHex(digest));
  }

  /** What a cached layer unpacks to, when it was measured. */
  async unpackedSize(digest: string): Promise<number | undefined> {
    try {
      // digits and a newline, as written: anything else in its place (a FIFO, a huge file, an
      // empty or zeroed one, which Number() would have read as 0) is no size
      const text = (await readSmallFile(this.sizePath(digest), 32)).bytes.toString('latin1');
      const n = /^\d{1,20}\n$/.test(text) ? Number(text) : NaN;
      return Number.isSafeInteger(n) ? n : undefined;
    } catch {
      return undefined;
    }
  }

  private async keepUnpackedSize(digest: string, n: number | undefined): Promise<void> {
    if (n === undefined) return;
    await makeDirs(join(this.dir, ...SIZES));
    // synced, unlike the other small entries: nothing ties a size to its layer, and a file a
    // power cut left holding another's old bytes would feed the signed image-store estimate
    await writeFileAtomic(this.sizePath(digest), `${n}\n`);
  }

  /**
   * A fact about a blob kept under `kind` (a directory name that says what it is and how it was
   * made), at most `maxBytes`; undefined when there is none. The caller validates it.
   */
  async readFact(kind: string, digest: string, maxBytes: number): Promise<Buffer | undefined> {
    try {
      return (
        await readSmallFile(join(this.dir, FACTS, kind, 'sha256', digestHex(digest)), maxBytes)
      ).bytes;
    } catch {
      return undefined;
    }
  }

  /**
   * Keeps a fact about a blob (whole or not at all while the machine runs; not synced, so after
   * a power cut it may read empty or zeroed: the reader's validation turns that away); dropped
   * and pruned with the blob.
   */
  async keepFact(kind: string, digest: string, bytes: Uint8Array | string): Promise<void> {
    await makeDirs(join(this.dir, FACTS, kind, 'sha256'));
    await replaceFile(join(this.dir, FACTS, kind, 'sha256', digestHex(digest)), bytes);
  }

  /** A full disk is one line naming the cache and the ways out, and leaves nothing half-written. */
  private full(err: unknown, partial?: string): Promise<never> {
    return (partial ? rm(partial, { force: true }) : Promise.resolve())
      .catch(() => undefined)
      .then(() => {
        throw new OciError(
          'NO_SPACE',
          `no space left for the blob cache ${this.dir}: free space there ("bundle cache prune --cache ${this.dir}" empties it) or pass --cache DIR on a disk with room`,
          { cause: err },
        );
      });
  }

  /** Removes a blob and its unpacked size: a copy found damaged is fetched again by the next run. */
  async drop(digest: string): Promise<void> {
    this.checked.delete(digest);
    await rm(this.path(digest), { force: true });
    for (const f of await factFiles(this.dir, digestHex(digest))) await rm(f, { force: true });
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
    if (actual !== digest)
      throw new OciError('DIGEST_MISMATCH', `content hashes to ${actual}, expected ${digest}`);
    return this.once(digest, () => this.putNow(digest, bytes));
  }

  private async putNow(digest: string, bytes: Uint8Array): Promise<string> {
    const final = this.path(digest);
    // not synced (a cache need not survive a power cut whole): a copy left empty or zeroed by
    // one is told apart here, by its bytes, and written again
    if (await holds(final, bytes)) {
      this.checked.add(digest);
      return final;
    }
    try {
      await makeDirs(join(this.dir, 'blobs', 'sha256'));
      await replaceFile(final, bytes);
      this.checked.add(digest);
    } catch (err) {
      if (isFull(err)) return this.full(err);
      throw err;
    }
    return final;
  }

  /** Fetches a blob through `open(offset)` unless the cache holds it; returns its path. */
  async fetch(
    digest: string,
    size: number,
    open: (offset: number) => Promise<Readable>,
    opts: CacheFetchOptions = {},
  ): Promise<string> {
    const running = this.inflight.get(digest);
    if (running) {
      const path = await running;
      opts.onBytes?.(size);
      return path;
    }
    return this.once(digest, async () => {
      try {
        return await this.fetchNow(digest, size, open, opts);
      } catch (err) {
        if (isFull(err)) return this.full(err, `${this.path(digest)}.partial`);
        throw err;
      }
    });
  }

  /** A blob fetched before sizes were kept: measured once from the cached file. */
  private async measureCached(digest: string, size: number): Promise<void> {
    if ((await this.unpackedSize(digest)) !== undefined) return;
    const counter = new UnpackedCounter(size);
    for await (const chunk of createReadStream(this.path(digest)))
      await counter.push(chunk as Buffer);
    await this.keepUnpackedSize(digest, await counter.finish());
  }

  /** A blob the cache holds: its use recorded, measured if it never was. */
  private async reuse(digest: string, size: number, opts: CacheFetchOptions): Promise<string> {
    const final = this.path(digest);
    // the mtime says when a blob was last used: "bundle cache prune --older-than" reads it
    const now = new Date();
    await utimes(final, now, now).catch(() => undefined);
    if (opts.measure) await this.measureCached(digest, size);
    opts.onBytes?.(size);
    return final;
  }

  private async fetchNow(
    digest: string,
    size: number,
    open: (offset: number) => Promise<Readable>,
    opts: CacheFetchOptions,
  ): Promise<string> {
    if (await this.has(digest, size)) return this.reuse(digest, size, opts);
    await makeDirs(join(this.dir, 'blobs', 'sha256'));
    const feeds: Feeds = {};
    const reach = reachOnce(opts.onBytes);
    await abandonOnFailure(
      () =>
        withRetry(() => this.attempt(digest, size, open, opts, { feeds, reach }), {
          attempts: opts.attempts ?? 5,
          signal: this.signal,
          // A short read or a dropped connection resumes; a wrong digest or refusal does not.
          retryable: (err) => {
            if (!(err instanceof OciError)) return !isFull(err);
            return (
              err.code === 'NETWORK_ERROR' ||
              err.code === 'REGISTRY_ERROR' ||
              (err.code === 'SIZE_MISMATCH' && /ended after/.test(err.message))
            );
          },
        }),
      () => {
        feeds.counter?.abandon();
        feeds.tap?.abandon();
      },
    );
    return this.path(digest);
  }

  /** One try: what the .partial holds re-hashed, the rest downloaded after it, then sealed. */
  private async attempt(
    digest: string,
    size: number,
    open: (offset: number) => Promise<Readable>,
    opts: CacheFetchOptions,
    { feeds, reach }: { feeds: Feeds; reach: (offset: number) => void },
  ): Promise<string> {
    const partial = `${this.path(digest)}.partial`;
    // Re-hash what is on disk each attempt: after a failed write the hash state and the file may disagree.
    const hash = newSha256();
    feeds.counter?.abandon();
    feeds.counter = opts.measure ? new UnpackedCounter(size) : undefined;
    feeds.tap?.abandon();
    feeds.tap = opts.tap?.();
    const have = await rehashPartial(partial, hash, feeds);
    if (have > size) {
      await rm(partial, { force: true });
      hash.destroy();
      feeds.tap?.abandon();
      return this.fetchNow(digest, size, open, opts);
    }
    reach(have);
    const at = { written: have };
    if (have < size) {
      const append = new BatchedAppend({
        path: partial,
        digest,
        size,
        hash,
        at,
        reach,
        feeds: [feeds.counter, feeds.tap].filter((f) => f !== undefined),
      });
      await pipeline(await open(have), append, this.signal ? { signal: this.signal } : {});
    }
    return this.seal(digest, size, at.written, hash, feeds);
  }

  /** A download that ended: held to its size and digest, then stored under its digest with what was worked out from it. */
  private async seal(
    digest: string,
    size: number,
    written: number,
    hash: ReturnType<typeof newSha256>,
    feeds: Feeds,
  ): Promise<string> {
    const final = this.path(digest);
    const partial = `${final}.partial`;
    if (written !== size)
      throw new OciError('SIZE_MISMATCH', `blob ${digest} ended after ${written} of ${size} bytes`);
    const actual = 'sha256:' + hash.digest('hex');
    if (actual !== digest) {
      await rm(partial, { force: true });
      throw new OciError('DIGEST_MISMATCH', `blob ${digest} downloaded with digest ${actual}`);
    }
    await rename(partial, final);
    this.checked.add(digest);
    await this.keepUnpackedSize(digest, await feeds.counter?.finish());
    await feeds.tap?.finish();
    return final;
  }
}

/** Whether `file` is a regular file holding exactly `bytes`. */
async function holds(file: string, bytes: Uint8Array): Promise<boolean> {
  try {
    return (await readSmallFile(file, bytes.length)).bytes.equals(bytes);
  } catch {
    return false;
  }
}

/** What a download feeds its bytes to besides the digest check: a fresh pair each attempt. */
interface Feeds {
  counter?: UnpackedCounter | undefined;
  tap?: BlobTap | undefined;
}

/**
 * Progress in bytes reached: a download that restarts lower (its .partial went) counts only
 * what goes past the highest offset again, so progress never adds up to more than the blob.
 */
function reachOnce(onBytes: ((n: number) => void) | undefined): (offset: number) => void {
  let reported = 0;
  return (offset) => {
    if (offset <= reported) return;
    onBytes?.(offset - reported);
    reported = offset;
  };
}

/** What an earlier attempt (or run) left in `partial`, hashed and fed again; its length (0 when there is none). */
async function rehashPartial(
  partial: string,
  hash: ReturnType<typeof newSha256>,
  feeds: Feeds,
): Promise<number> {
  let have = 0;
  try {
    for await (const chunk of createReadStream(partial)) {
      hash.update(chunk as Buffer);
      await feeds.counter?.push(chunk as Buffer);
      await feeds.tap?.push(chunk as Buffer);
      have += (chunk as Buffer).length;
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  return have;
}

/** A download given up on stops its measuring too: the counting thread holds nothing for it. */
async function abandonOnFailure<T>(work: () => Promise<T>, abandon: () => void): Promise<T> {
  try {
    return await work();
  } catch (err) {
    abandon();
    throw err;
  }
}

/** What a cache holds, and how to empty it (`bundle cache info|prune`). */
export async function cacheInfo(dir: string): Promise<CacheInfo> {
  const info: CacheInfo = { dir, blobs: 0, bytes: 0, partial: 0, partialBytes: 0 };
  for (const { size, unfinished } of await cacheFiles(dir)) {
    if (unfinished) {
      info.partial++;
      info.partialBytes += size;
    } else {
      info.blobs++;
      info.bytes += size;
    }
  }
  return info;
}

async function cacheFiles(
  dir: string,
): Promise<{ path: string; hex: string; size: number; mtimeMs: number; unfinished: boolean }[]> {
  const blobs = join(dir, 'blobs', 'sha256');
  let names: string[];
  try {
    names = await readdir(blobs);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const files = [];
  for (const name of names) {
    const st = await stat(join(blobs, name)).catch(() => undefined);
    if (!st?.isFile()) continue;
    const hex = /^[0-9a-f]{64}$/.test(name) ? name : '';
    files.push({
      path: join(blobs, name),
      hex,
      size: st.size,
      mtimeMs: st.mtimeMs,
      unfinished: hex === '',
    });
  }
  return files;
}

/**
 * Removes unfinished downloads and temp files, and the blobs not used for `olderThanDays`
 * (every blob without it). Nothing else in `dir` is touched. Returns what went.
 */
export async function pruneCache(
  dir: string,
  opts: { olderThanDays?: number; now?: number } = {},
): Promise<{ files: number; bytes: number }> {
  const cutoff = (opts.now ?? Date.now()) - (opts.olderThanDays ?? 0) * 86_400_000;
  let files = 0;
  let bytes = 0;
  for (const f of await cacheFiles(dir)) {
    if (!f.unfinished && opts.olderThanDays !== undefined && f.mtimeMs > cutoff) continue;
    await rm(f.path, { force: true });
    if (f.hex) for (const fact of await factFiles(dir, f.hex)) await rm(fact, { force: true });
    files++;
    bytes += f.size;
  }
  return { files, bytes };
}

const LOCKS = 'locks';
const LOCK_NAME = /^(create|prune)\.([1-9]\d*)$/;

/**
 * A reader-writer lock on a cache: every \`bundle create\` holds it shared (\`locks/create.PID\`),
 * \`bundle cache prune\` exclusive (\`locks/prune.PID\`), so a prune never deletes what a running
 * create is downloading or about to pack. Each side writes its file, then looks for the other
 * side's live files (a dead pid's file, from a killed run, is removed): of two that start at
 * once at least one sees the other and steps back with BUSY. Returns the release.
 */
export async function lockCache(
  dir: string,
  mode: 'shared' | 'exclusive',
): Promise<() => Promise<void>> {
  const locks = join(dir, LOCKS);
  await makeDirs(locks);
  const mine = join(locks, `${mode === 'shared' ? 'create' : 'prune'}.${process.pid}`);
  await writeFile(mine, `${process.pid}\n`);
  const release = () => rm(mine, { force: true }).catch(() => undefined);
  const others: number[] = [];
  for (const name of await readdir(locks)) {
    const m = LOCK_NAME.exec(name);
    if (!m || Number(m[2]) === process.pid) continue;
    // shared holders do not exclude one another
    if (mode === 'shared' && m[1] === 'create') continue;
    if (!pidExists(Number(m[2]))) {
      await rm(join(locks, name), { force: true }).catch(() => undefined);
      continue;
    }
    others.push(Number(m[2]));
    if (m[1] === 'prune') {
      await release();
      throw new OciError(
        'BUSY',
        `the blob cache ${dir} is being pruned (bundle cache prune, pid ${m[2]}): run again once it ends`,
      );
    }
  }
  if (others.length) {
    await release();
    throw new OciError(
      'BUSY',
      `the blob cache ${dir} is in use by bundle create (pid ${others.join(', ')}): prune it once that run ends, or prune another --cache`,
    );
  }
  return release;
}
