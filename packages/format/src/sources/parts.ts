import { readdir, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { FormatError } from '../errors.js';
import { READ_CHUNK } from '../layout.js';
import type { BundleSource, StreamOptions } from '../source.js';
import { FileSource, withSource } from './file.js';

/**
 * Most parts one bundle may be split into: three digits in the name, and one open file each
 * while the bundle is read. A 20 GB release on FAT32 takes 5.
 */
export const MAX_PARTS = 999;

const PART_NAME = /^(.+\.bundle)\.part-(\d+)-of-(\d+)$/;

/** `NAME.bundle.part-003-of-005`: the name of part `n` of `count` (numbered from 1). */
export function partName(base: string, n: number, count: number): string {
  const width = Math.max(3, String(count).length);
  return `${basename(base)}.part-${String(n).padStart(width, '0')}-of-${String(count).padStart(width, '0')}`;
}

/** The part a file name says it is, or undefined when it is not a part's name. */
export function parsePartName(
  name: string,
): { base: string; n: number; count: number } | undefined {
  const m = PART_NAME.exec(basename(name));
  if (!m || m[1]!.startsWith('.')) return undefined;
  return { base: m[1]!, n: Number(m[2]), count: Number(m[3]) };
}

export const isPartName = (name: string): boolean => parsePartName(name) !== undefined;

/** One file of a split bundle as found in its directory. */
export interface FoundPart {
  path: string;
  n: number;
  size: number;
}

const badParts = (message: string) => new FormatError('BAD_PARTS', message);

/** The file names in `dir` that are parts of `base` (NAME.bundle), parsed. */
export async function partNamesIn(
  dir: string,
  base: string,
): Promise<Array<{ name: string; n: number; count: number }>> {
  const names = await readdir(dir).catch((cause: unknown) => {
    throw new FormatError('IO_ERROR', `cannot read ${dir}: ${(cause as Error).message}`, { cause });
  });
  const out: Array<{ name: string; n: number; count: number }> = [];
  for (const name of names) {
    const p = parsePartName(name);
    if (p && p.base === base) out.push({ name, n: p.n, count: p.count });
  }
  return out.sort((a, b) => a.n - b.n || (a.name < b.name ? -1 : 1));
}

/** The count most parts agree on (ties: the larger). */
function agreedCount(found: Array<{ count: number }>): number {
  const votes = new Map<number, number>();
  for (const f of found) votes.set(f.count, (votes.get(f.count) ?? 0) + 1);
  return [...votes].sort((a, b) => b[1] - a[1] || b[0] - a[0])[0]![0];
}

/**
 * The complete, consistent part set of `base` in `dir`, in order, or BAD_PARTS naming the
 * first part that is wrong and what to do. Sizes: every part but the last is the split size,
 * so a part shorter than the others was cut short, and one longer does not belong.
 */
export async function findParts(dir: string, base: string): Promise<FoundPart[]> {
  const names = await partNamesIn(dir, base);
  if (names.length === 0)
    throw new FormatError(
      'IO_ERROR',
      `cannot read ${join(dir, base)}: neither the file nor any ${base}.part-NNN-of-NNN is in ${dir}; give the path of the bundle or of one of its parts`,
    );
  const count = agreedCount(names);
  if (count > MAX_PARTS)
    throw badParts(
      `${names[0]!.name} says the bundle has ${count} parts, more than the ${MAX_PARTS} a bundle may be split into: split it again with a larger --size`,
    );
  const odd = names.find((f) => f.count !== count);
  if (odd)
    throw badParts(
      `${odd.name} says the bundle has ${odd.count} parts, the others ${count}: it belongs to another split of ${base}; remove it and copy the right part from the same split`,
    );
  const beyond = names.find((f) => f.n < 1 || f.n > count);
  if (beyond)
    throw badParts(
      `${beyond.name} is numbered outside 1 to ${count}: it does not belong to this split of ${base}; remove it`,
    );
  const twice = names.find((f, i) => i > 0 && names[i - 1]!.n === f.n);
  if (twice)
    throw badParts(
      `part ${twice.n} of ${count} of ${base} is in ${dir} twice (${names.find((f) => f.n === twice.n)!.name} and ${twice.name}): keep the one from the same split as the others`,
    );
  if (names.length < count) {
    const missing = Array.from({ length: count }, (_, i) => i + 1).find(
      (n) => !names.some((f) => f.n === n),
    )!;
    throw badParts(
      `part ${missing} of ${count} (${partName(base, missing, count)}) is missing from ${dir}: copy every part of ${base} into the same directory`,
    );
  }
  const parts: FoundPart[] = [];
  for (const f of names) {
    const path = join(dir, f.name);
    const st = await stat(path).catch((cause: unknown) => {
      throw new FormatError('IO_ERROR', `cannot read ${path}: ${(cause as Error).message}`, {
        cause,
      });
    });
    parts.push({ path, n: f.n, size: st.size });
  }
  checkSizes(parts, base);
  return parts;
}

/** Every part but the last the size most of them have; the last not longer, and none empty. */
function checkSizes(parts: FoundPart[], base: string): void {
  const count = parts.length;
  const full =
    parts.length > 1
      ? agreedCount(parts.slice(0, -1).map((p) => ({ count: p.size })))
      : parts[0]!.size;
  for (const p of parts) {
    const last = p.n === count;
    const name = basename(p.path);
    if (p.size === 0 || (!last && p.size < full)) {
      throw badParts(
        `part ${p.n} of ${count} (${name}) is ${p.size} bytes, ${last ? 'empty' : `the other parts ${full}`}: it was cut short; copy it again from the same split of ${base}`,
      );
    }
    if (p.size > full) {
      throw badParts(
        `part ${p.n} of ${count} (${name}) is ${p.size} bytes, longer than the ${full} of the other parts: it does not belong to this split of ${base}; copy it again from the same split`,
      );
    }
  }
}

/** A system error as it came, its message naming the part (code, errno and syscall kept, so it stays a system error). */
function namingPart(err: unknown, part: FoundPart, count: number): unknown {
  const e = err as NodeJS.ErrnoException;
  if (typeof e?.syscall !== 'string') return err;
  return Object.assign(
    new Error(`${e.message} (part ${part.n} of ${count}, ${part.path})`, { cause: err }),
    { code: e.code, errno: e.errno, syscall: e.syscall, path: part.path },
  );
}

/**
 * A bundle split into `NAME.bundle.part-001-of-005` files in one directory, whose
 * concatenation is the bundle byte for byte (so its whole-file digest is the bundle's). Each
 * part is opened once, as FileSource opens a file; an offset maps to the part holding it.
 * Finding and checking the set is all this adds: the readers above verify every byte.
 */
export class PartsSource implements BundleSource {
  /** Where each part starts in the bundle. */
  private readonly starts: number[];

  private constructor(
    readonly identity: string,
    readonly size: number,
    private readonly parts: FoundPart[],
    private readonly files: FileSource[],
  ) {
    this.starts = [];
    let at = 0;
    for (const p of parts) {
      this.starts.push(at);
      at += p.size;
    }
  }

  /** From any one part's path, or NAME.bundle when only its parts exist. */
  static async open(path: string): Promise<PartsSource> {
    const dir = dirname(path);
    const base = parsePartName(path)?.base ?? basename(path);
    const parts = await findParts(dir, base);
    const files: FileSource[] = [];
    try {
      for (const p of parts) files.push(await FileSource.open(p.path));
      // sized again as opened: a part that changed since it was listed is checked as it will be read
      const opened = parts.map((p, i) => ({ ...p, size: files[i]!.size }));
      checkSizes(opened, base);
      return new PartsSource(
        `${join(dir, base)} (${parts.length} parts)`,
        opened.reduce((s, p) => s + p.size, 0),
        opened,
        files,
      );
    } catch (err) {
      await Promise.all(files.map((f) => f.close()));
      throw err;
    }
  }

  /** The parts holding [start, end), each with the range within it. */
  private *spans(start: number, end: number): Generator<{ i: number; from: number; to: number }> {
    for (let i = 0; i < this.parts.length; i++) {
      const s = this.starts[i]!;
      const e = s + this.parts[i]!.size;
      if (e <= start || s >= end) continue;
      yield { i, from: Math.max(start, s) - s, to: Math.min(end, e) - s };
    }
  }

  async read(offset: number, length: number, into?: Buffer): Promise<Buffer> {
    const spans = [...this.spans(offset, offset + length)];
    const bufs: Buffer[] = [];
    for (const { i, from, to } of spans) {
      // within one part the caller's buffer serves; across parts the pieces are joined anyway
      const got = await this.files[i]!.read(
        from,
        to - from,
        spans.length === 1 ? into : undefined,
      ).catch((err: unknown) => {
        throw namingPart(err, this.parts[i]!, this.parts.length);
      });
      bufs.push(got);
      if (got.length < to - from) break; // this part ends early: so does the bundle
    }
    return bufs.length === 1 ? bufs[0]! : Buffer.concat(bufs);
  }

  stream(start: number, end: number, opts: StreamOptions = {}): Readable {
    return Readable.from(this.chunks(start, end, opts), {
      objectMode: false,
      highWaterMark: READ_CHUNK,
    });
  }

  /** Part after part, each streamed as its file is; a part that ends early ends the bundle there. */
  private async *chunks(start: number, end: number, opts: StreamOptions): AsyncGenerator<Buffer> {
    for (const { i, from, to } of this.spans(start, end)) {
      let got = 0;
      try {
        for await (const chunk of this.files[i]!.stream(from, to, opts)) {
          got += (chunk as Buffer).length;
          yield chunk as Buffer;
        }
      } catch (err) {
        throw namingPart(err, this.parts[i]!, this.parts.length);
      }
      if (got < to - from) return;
    }
  }

  /** The sum of the parts' lengths now; rejects naming the part that cannot be reached (its file gone). */
  async currentSize(): Promise<number> {
    let total = 0;
    for (const f of this.files) total += await f.currentSize();
    return total;
  }

  async close(): Promise<void> {
    await Promise.all(this.files.map((f) => f.close()));
  }
}

/**
 * Opens the bundle at `path`: the file itself, or the parts it was split into when `path`
 * names one of them, or names NAME.bundle and only its parts are there. The caller closes it.
 */
export async function openBundle(path: string): Promise<BundleSource> {
  return (await namesSplitBundle(path)) ? PartsSource.open(path) : FileSource.open(path);
}

/** Whether `path` names a split bundle: one of its parts, or NAME.bundle that is not there while its parts are. */
export async function namesSplitBundle(path: string): Promise<boolean> {
  if (isPartName(path)) return true;
  if (
    !basename(path).endsWith('.bundle') ||
    (await stat(path).then(
      () => true,
      () => false,
    ))
  )
    return false;
  return (await partNamesIn(dirname(path), basename(path)).catch(() => [])).length > 0;
}

/** `use(source)` over the bundle at `path` (a file or its parts, as openBundle), closed after. */
export function withBundle<T>(path: string, use: (source: BundleSource) => Promise<T>): Promise<T> {
  return withSource(openBundle(path), use);
}
