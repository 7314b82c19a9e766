// A split bundle whose parts come on several sticks, plugged one after another: the agent
// copies the parts each stick holds into a spool under its upgrade directory and loads from
// there once the spool holds them all. One bundle at a time; whole parts only (temp + rename);
// a refused stick empties the spool, so nothing of a set that cannot be loaded stays on disk.
import { lstat, mkdir, readdir, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import {
  MAX_PARTS,
  parsePartName,
  partName,
  readHeader,
  withBundleFile,
} from '@offline-bundle/format';
import { filesystemFree, readSmallFile, writeFileAtomic } from '@offline-bundle/host';
import { SPOOLED_MEDIA, type StatusTracker } from '@offline-bundle/status';
import { formatBytes } from '@offline-bundle/cli';
import { AgentError, oneLine, reasonOf } from '../errors.js';
import type { Logger } from '../log.js';
import {
  checkSizes,
  differentDuplicate,
  sameCount,
  stickCount,
  type KnownPart,
} from './part-spool-checks.js';
import { copyPart, hashPart } from './part-spool-copy.js';
import { checkFramesFit } from './part-spool-fit.js';
import {
  copyProgress,
  showChecking,
  showCopying,
  showHeldAtStart,
  showWaiting,
  type SpoolShown,
} from './part-spool-status.js';
import { partNameProblem } from './part-sets.js';
import { missingParts, numberRanges } from './part-spool-words.js';

/** The spool's directory under the upgrade directory (staging's cleanup leaves it: it holds no bundle.json and is no `.partial`). */
export const SPOOL_DIR_NAME = 'parts-spool';
const INDEX = 'spool.json';
/**
 * Bound on spool.json as read back: a part's entry holds its name (200 bytes at most, refused
 * otherwise), a sha256, its size and the stick's name (cut to MAX_FROM_CHARS), well under 1 KiB
 * even JSON-escaped. The index is rewritten whole after each part (3 fsyncs): O(n²) bytes for
 * n parts, at most some 500 MB written over a 999-part set, against the parts' own gigabytes.
 */
const MAX_INDEX_BYTES = 1024 + MAX_PARTS * 1024;
/** How much of a stick's description an index entry keeps. */
const MAX_FROM_CHARS = 160;
/** A stick's description as an index entry keeps it: cut short, control characters (6 bytes each in JSON) replaced. */
const fromWords = (media: string): string =>
  media.slice(0, MAX_FROM_CHARS).replace(/[\x00-\x1f\x7f]/g, '?');

/** What the spool holds: one bundle's parts, each with the sha256 it was copied with. */
interface SpoolIndex {
  base: string;
  count: number;
  parts: Array<{ n: number; name: string; size: number; sha256: string; from: string }>;
  /** The release part 1's head names, once part 1 is held and its head reads on its own. */
  release?: string;
}

/** A stick's parts of one bundle, as the media watcher offers them. */
export interface PartsOnStick {
  dir: string;
  names: readonly string[];
  media: string;
}

export type SpoolOutcome =
  { complete: false; have: number[]; count: number } | { complete: true; file: string };

/** Refusals of the set: the spool is emptied (a stick pulled mid-copy or a stop keeps the whole parts). */
const DROPS_SPOOL: ReadonlySet<string> = new Set([
  'PartsMixed',
  'PartCutShort',
  'PartsIncomplete',
  'InsufficientSpace',
]);

/**
 * A load of the spool's parts that ended without a verdict on them: stopped (SIGTERM), the
 * disk read failing, the load lock busy. The parts stay, and a restart loads them again.
 */
const KEEPS_SPOOL: ReadonlySet<string> = new Set(['Interrupted', 'MediaRemoved', 'Busy']);

/** Whether a load from the spool that ended so (`err` undefined: loaded) is done with the parts held. */
export function loadEndsSpool(err: unknown, aborted: boolean): boolean {
  if (err === undefined) return true;
  return !aborted && !KEEPS_SPOOL.has(reasonOf(err));
}

export class PartSpool {
  readonly dir: string;

  /** `imageStoreDir`: the runtime's image store; on the spool's filesystem, the images' room is counted too. */
  constructor(
    upgradeDir: string,
    private readonly reserveBytes: number,
    private readonly log: Logger,
    private readonly imageStoreDir?: string,
  ) {
    this.dir = join(upgradeDir, SPOOL_DIR_NAME);
  }

  /** Whether `file` is a part in the spool: a load of it ends the spool. */
  holds(file: string): boolean {
    return dirname(file) === this.dir;
  }

  async clear(): Promise<void> {
    await rm(this.dir, { recursive: true, force: true });
  }

  /** The index, or undefined when there is none or it does not match the files (then the spool is emptied). */
  async index(): Promise<SpoolIndex | undefined> {
    try {
      const read = await readSmallFile(join(this.dir, INDEX), MAX_INDEX_BYTES).catch(
        async (err: NodeJS.ErrnoException) => {
          if (err.code !== 'ENOENT') throw err;
          // no index: parts renamed in before a crash wrote it are held by nothing
          if ((await readdir(this.dir).catch(() => [])).length > 0)
            throw new Error(`${INDEX} is missing`);
          return undefined;
        },
      );
      if (read === undefined) return undefined;
      const idx = JSON.parse(read.bytes.toString()) as SpoolIndex;
      for (const p of idx.parts) {
        // only part names of its own bundle, in the spool itself
        if (basename(p.name) !== p.name || parsePartName(p.name)?.base !== idx.base)
          throw new Error(`${String(p.name)} is not a part of ${idx.base}`);
        if ((await stat(join(this.dir, p.name))).size !== p.size)
          throw new Error(`${p.name} is not the size recorded`);
      }
      return idx;
    } catch (err) {
      this.log.warn(
        'parts',
        `the part spool ${this.dir} does not match its index (${oneLine(err)}): emptied`,
      );
      await this.clear();
      return undefined;
    }
  }

  /** At start: parts left half-copied by a crash go; what is held is said again, or offered when whole. */
  async startUp(tracker: StatusTracker): Promise<string | undefined> {
    const names = await readdir(this.dir).catch(() => [] as string[]);
    for (const n of names) if (n.startsWith('.')) await rm(join(this.dir, n), { force: true });
    const idx = await this.index();
    if (!idx) return undefined;
    const have = idx.parts.map((p) => p.n);
    if (have.length === idx.count) return join(this.dir, partName(idx.base, 1, idx.count));
    showHeldAtStart(tracker, { file: idx.base, media: this.media() }, have, idx.count, idx.base);
    return undefined;
  }

  /** How the status names the spool as the bundle's media: the words summary.ts knows need no stick. */
  media(): string {
    return `${SPOOLED_MEDIA} (${this.dir})`;
  }

  /** Whether `file` is a part of the bundle the spool collects (a whole set of it on one stick makes the spool moot). */
  async collects(file: string): Promise<boolean> {
    const base = parsePartName(file)?.base;
    return base !== undefined && (await this.index())?.base === base;
  }

  /**
   * Takes the parts on a stick: checks them against each other and against those held, copies
   * the ones not held, and says which are still to come. Refusals are AgentErrors (one line).
   */
  async collect(
    stick: PartsOnStick,
    tracker: StatusTracker,
    signal?: AbortSignal,
  ): Promise<SpoolOutcome> {
    const base = parsePartName(stick.names[0]!)!.base;
    for (const n of stick.names) {
      const why = partNameProblem(n);
      if (why)
        throw new AgentError(
          'PartsIncomplete',
          `${JSON.stringify(n.slice(0, 60))}${n.length > 60 ? '…' : ''} on ${stick.media} is refused: ${why}; nothing was copied`,
        );
    }
    let idx = await this.index();
    if (idx && idx.base !== base) {
      const kept = await this.otherBundle(stick, base, idx);
      if (kept) return kept;
      idx = undefined;
    }
    try {
      const onStick = await this.survey(stick, base);
      const count = stickCount(base, onStick);
      const held = (idx?.parts ?? []).map((p): KnownPart => ({
        ...p,
        count: idx!.count,
        where: `copied before from ${p.from}`,
      }));
      sameCount(base, onStick, held);
      const full = checkSizes(base, count, onStick, held);
      await this.sameBytes(stick, base, onStick, idx, tracker, signal);
      const todo = onStick.filter((p) => !held.some((h) => h.n === p.n));
      await this.checkRoom(base, count, full, [...held, ...todo], stick.dir);
      idx ??= { base, count, parts: [] };
      await this.copyAll(stick, todo, idx, tracker, signal);
    } catch (err) {
      if (err instanceof AgentError && DROPS_SPOOL.has(err.reason)) await this.clear();
      throw err;
    }
    const have = idx.parts.map((p) => p.n).sort((a, b) => a - b);
    if (have.length === idx.count) return { complete: true, file: await this.fits(idx) };
    showWaiting(
      tracker,
      { file: join(stick.dir, base), media: stick.media },
      have,
      idx.count,
      base,
    );
    this.log.info(
      'parts',
      `holding parts ${numberRanges(have)} of ${idx.count} of ${base} in ${this.dir}: waiting for the stick with ${numberRanges(missingParts(have, idx.count))}`,
    );
    return { complete: false, have, count: idx.count };
  }

  /**
   * Parts of `base` while those of `idx.base` are held. A stray part file must never cost the
   * parts collected, so the spool is given up for `base` only when this stick brings base's
   * part 1 and no part of the bundle held, and that part 1's head reads as a bundle's: a
   * technician switching updates. Beside parts of the bundle held, other names are ignored
   * (their set is said again as it is); else refused, the parts held kept.
   */
  private async otherBundle(
    stick: PartsOnStick,
    base: string,
    idx: SpoolIndex,
  ): Promise<SpoolOutcome | undefined> {
    const held = idx.parts.map((p) => p.n);
    const heldWords = `parts ${numberRanges(held)} of ${idx.count} of ${idx.base}`;
    const names = await readdir(stick.dir).catch(() => [] as string[]);
    if (names.some((n) => parsePartName(n)?.base === idx.base)) {
      this.log.warn(
        'parts',
        `${stick.media} holds parts of ${base} beside those of ${idx.base}, which is being collected: the parts of ${base} are ignored`,
      );
      return { complete: false, have: held.sort((a, b) => a - b), count: idx.count };
    }
    const one = stick.names.find((n) => parsePartName(n)?.n === 1);
    const release = one ? await releaseOf(join(stick.dir, one)) : undefined;
    if (release === undefined) {
      throw new AgentError(
        'PartsOtherBundle',
        `${stick.media} holds ${stick.names.length === 1 ? 'part' : 'parts'} ${numberRanges(stick.names.map((n) => parsePartName(n)!.n))} of ${parsePartName(stick.names[0]!)!.count} of ${base}, not of ${idx.base}, whose ${heldWords} are held: nothing was copied, the parts held are kept; plug in the stick with parts ${numberRanges(missingParts(held, idx.count))} of ${idx.count} of ${idx.base} (to collect ${base} instead, start with the stick holding its part 1)`,
      );
    }
    this.log.warn(
      'parts',
      `part 1 of ${base} (release ${release}) on ${stick.media}: the ${heldWords} copied before are dropped (one bundle is collected at a time)`,
    );
    await this.clear();
    return undefined;
  }

  /** The whole spool's part 1, once its parts are seen to be of one bundle (part-spool-fit.ts); else refused, and emptied. */
  private async fits(idx: SpoolIndex): Promise<string> {
    const file = join(this.dir, partName(idx.base, 1, idx.count));
    const splitSize =
      idx.count > 1 ? idx.parts.find((p) => p.n === 1)!.size : Number.MAX_SAFE_INTEGER;
    try {
      await checkFramesFit(file, idx.base, idx.count, splitSize);
    } catch (err) {
      await this.clear();
      throw err;
    }
    return file;
  }

  /** The stick's parts, each lstat'd: a part that is not a regular file (a symbolic link) is refused by name. */
  private async survey(stick: PartsOnStick, base: string): Promise<KnownPart[]> {
    const out: KnownPart[] = [];
    for (const name of stick.names) {
      const p = parsePartName(name);
      if (!p || p.base !== base) continue;
      const st = await lstat(join(stick.dir, name)).catch((err: Error) => {
        throw new AgentError(
          'MediaRemoved',
          `cannot read ${join(stick.dir, name)} (${oneLine(err)}): was the USB stick removed? Plug it in again`,
        );
      });
      if (!st.isFile())
        throw new AgentError(
          'Corrupt',
          `${join(stick.dir, name)} is not a regular file (a symbolic link or a special file): nothing was copied; copy the part itself onto the stick and plug it in again`,
        );
      out.push({ name, n: p.n, count: p.count, size: st.size, where: 'this stick' });
    }
    if (out.length === 0)
      throw new AgentError(
        'MediaRemoved',
        `the parts of ${base} are gone from ${stick.dir}: was the USB stick removed? Plug it in again`,
      );
    return out.sort((a, b) => a.n - b.n);
  }

  /** A part on the stick that is held already must be the same bytes (same size was checked). */
  private async sameBytes(
    stick: PartsOnStick,
    base: string,
    onStick: readonly KnownPart[],
    idx: SpoolIndex | undefined,
    tracker: StatusTracker,
    signal?: AbortSignal,
  ): Promise<void> {
    for (const s of onStick) {
      const h = idx?.parts.find((p) => p.n === s.n);
      if (!h) continue;
      // the read may take minutes (a part is up to 4 GiB): the stick must stay in meanwhile
      showChecking(
        tracker,
        { file: join(stick.dir, base), media: stick.media },
        s.n,
        s.count,
        base,
      );
      const src = join(stick.dir, s.name);
      const sha = await hashPart({
        src,
        size: s.size,
        label: `part ${s.n} of ${s.count}`,
        ...(signal ? { signal } : {}),
      });
      if (sha === h.sha256) continue;
      const theirs = s.n === 1 ? await releaseOf(src) : undefined;
      throw differentDuplicate(
        base,
        s,
        theirs && idx?.release
          ? `release ${theirs} on this stick, ${idx.release} copied before`
          : 'other bytes',
      );
    }
  }

  /** Room for the whole bundle (the parts' sizes: split size × count at most) plus the reserve, less what is held. */
  private async checkRoom(
    base: string,
    count: number,
    full: number | undefined,
    known: readonly KnownPart[],
    stickDir: string,
  ): Promise<void> {
    const last = known.find((p) => p.n === count)?.size;
    const each = full ?? Math.max(...known.map((p) => p.size));
    const bundle = each * (count - 1) + (last ?? each);
    const heldBytes = await this.heldBytes();
    const images = await this.imagesOnSpoolDisk(base, count, stickDir);
    const need = bundle - heldBytes + (images?.bytes ?? 0) + this.reserveBytes;
    const { free } = await filesystemFree(this.dir);
    if (free >= need) return;
    const imagesWords = images
      ? ` plus ${formatBytes(images.bytes)} for the update's images in ${images.dir} on the same disk,`
      : '';
    throw new AgentError(
      'InsufficientSpace',
      `not enough disk space to collect the ${count} parts of ${base}: they need about ${formatBytes(bundle)} (${formatBytes(bundle - heldBytes)} still to copy)${imagesWords} plus a ${formatBytes(this.reserveBytes)} reserve in ${this.dir}, which has ${formatBytes(free)} free; free ${formatBytes(need - free)} and plug the stick in again`,
    );
  }

  /**
   * The room the load will want for the images, once part 1's head reads (held, or on this
   * stick): counted when the image store is on the spool's filesystem, as the load's space
   * check (load/space.ts) counts it, so a set is not collected only to be refused there.
   */
  private async imagesOnSpoolDisk(
    base: string,
    count: number,
    stickDir: string,
  ): Promise<{ bytes: number; dir: string } | undefined> {
    if (!this.imageStoreDir) return undefined;
    const name = partName(base, 1, count);
    const bytes = (await totalsOf(join(this.dir, name))) ?? (await totalsOf(join(stickDir, name)));
    if (bytes === undefined) return undefined;
    const [spoolFs, storeFs] = await Promise.all([
      filesystemFree(this.dir),
      filesystemFree(this.imageStoreDir),
    ]);
    return spoolFs.dev === storeFs.dev ? { bytes, dir: this.imageStoreDir } : undefined;
  }

  private async heldBytes(): Promise<number> {
    return ((await this.index())?.parts ?? []).reduce((s, p) => s + p.size, 0);
  }

  /** Copies the parts in turn, the index rewritten after each: a part is held once it is renamed into place and listed. */
  private async copyAll(
    stick: PartsOnStick,
    todo: readonly KnownPart[],
    idx: SpoolIndex,
    tracker: StatusTracker,
    signal?: AbortSignal,
  ): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const total = todo.reduce((s, p) => s + p.size, 0);
    const shown: SpoolShown = { file: join(stick.dir, idx.base), media: stick.media };
    const progress = copyProgress(tracker);
    let before = 0;
    for (const p of todo) {
      showCopying(tracker, shown, p.n, idx.count, { done: before, total }, idx.base);
      const label = `part ${p.n} of ${idx.count}`;
      const dest = join(this.dir, partName(idx.base, p.n, idx.count));
      const sha256 = await copyPart(
        {
          src: join(stick.dir, p.name),
          size: p.size,
          label,
          progress: (b) => progress(before + b, total),
          ...(signal ? { signal } : {}),
        },
        dest,
      );
      idx.parts.push({
        n: p.n,
        name: partName(idx.base, p.n, idx.count),
        size: p.size,
        sha256,
        from: fromWords(stick.media),
      });
      if (p.n === 1) {
        const release = await releaseOf(dest);
        if (release) idx.release = release;
      }
      await writeFileAtomic(join(this.dir, INDEX), JSON.stringify(idx) + '\n', 0o600);
      before += p.size;
      this.log.info('parts', `copied ${label} of ${idx.base} from ${stick.media} into ${this.dir}`);
    }
  }
}

/** The release part 1's head names, when the head is whole in part 1 (a part smaller than the head is not). */
async function releaseOf(part1: string): Promise<string | undefined> {
  return withBundleFile(
    part1,
    async (source) => (await readHeader(source)).manifest.release.version,
  ).catch(() => undefined);
}

/** The images' room (totals.imageStoreBytes) part 1's head names, when the file is there and its head whole in it. */
async function totalsOf(part1: string): Promise<number | undefined> {
  return withBundleFile(
    part1,
    async (source) => (await readHeader(source)).manifest.totals.imageStoreBytes,
  ).catch(() => undefined);
}
