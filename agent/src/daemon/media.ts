import { EventEmitter } from 'node:events';
import { readFile, readdir, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { bundleKey } from '../state/bundle-records.js';
import { inspectHead, type HeadVerdict } from '../load/bundle-file.js';
import type { Logger } from '../log.js';
import { isWholeSet, lookAtPartSet, partNameProblem, partSets } from './part-sets.js';
import { DROP_DIRECTORY_MEDIA } from '@offline-bundle/status';
import { MAX_PARTS } from '@offline-bundle/format';

export interface FoundBundle {
  file: string;
  /** Human description of where it is: "USB stick LABEL (/media/usb)" or the directory. */
  media: string;
  /** Identity of this copy (device, inode, size, mtime): a changed file is a new bundle, a renamed one is not. */
  key: string;
  /** What its bundle.json says, unverified (the load checks the signature): to skip a forgotten release. */
  release?: { version: string; arch: string };
  /** Its bundle.json's digest, and for a delta the base's: a base beside its delta is not offered itself. */
  identity?: string;
  base?: string;
  /** Some parts of a split bundle on a stick, not all: the others come on other sticks (part-spool.ts). */
  partial?: { dir: string; names: string[] };
}

/** Mount points from /proc/self/mountinfo (field 5, with octal escapes such as \040 undone). */
export function parseMountinfo(text: string): string[] {
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => line.split(' ')[4] ?? '')
    .filter(Boolean)
    .map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))));
}

function under(path: string, roots: string[]): boolean {
  return roots.some((r) => path === r || path.startsWith(r.endsWith(sep) ? r : r + sep));
}

/**
 * Most `*.bundle` names looked at in one directory per poll (by name order): a stick or drop
 * directory holds a handful; thousands of junk files must not cost a stat each every poll.
 */
const MAX_BUNDLES_PER_DIR = 64;
/** Looks at an unchanged identity before a file counts as stable: first sight plus two polls. */
const STABLE_LOOKS = 3;
/** A file must also have been quiet this long (by its mtime, or as we watched it) before its head is read. */
const DEFAULT_QUIET_SECONDS = 5;

/**
 * A bundle's name: `*.bundle`, not a dot file. Copy tools write elsewhere and rename into place:
 * rsync `.NAME.bundle.XXXXXX`, curl/wget/browsers `NAME.bundle.part`, `*.tmp`, editors `*~`;
 * none of those ends in `.bundle`.
 */
const isBundleName = (n: string): boolean => n.endsWith('.bundle') && !n.startsWith('.');

/** One file as the watcher last saw it. */
interface Look {
  key: string;
  looks: number;
  /** When this identity was first seen (our clock). */
  since: number;
  /** The head was read for this identity and it is not (yet) loadable. */
  verdict?: 'incomplete' | 'notABundle';
}

interface MediaWatcherOptions {
  roots: string[];
  watchDirs: string[];
  pollSeconds: number;
  log: Logger;
  mountinfo?: string;
  /** Default 5 s. */
  quietSeconds?: number;
  /** The clock, for tests (ms). */
  now?: () => number;
}

/**
 * Finds bundles at the top of newly mounted media under the media roots, and in watched drop
 * directories. The mount table is the signal (polled: it works wherever the OS or the udev rule
 * mounts the stick, with no native addon). A copy still in progress is never offered: a file
 * counts once its identity (device, inode, size, mtime) stayed the same over STABLE_LOOKS polls,
 * it has been quiet for quietSeconds (its mtime that old, or unchanged that long as we watched),
 * it starts with a zstd frame and ends with a seek table (one whose bundle.json then does not
 * read is offered too: a damaged bundle, which the load reports). A copier that
 * writes the end first and pauses leaves a file whose head is not a bundle's yet: it waits, and
 * is looked at again when it changes. The head is read once per identity, so unchanged files cost
 * one stat per poll and nothing else. Each identity is offered once: renamed, or reached through
 * a symlink, it is the same bundle; written again, it is a new one.
 */
export class MediaWatcher extends EventEmitter<{ bundle: [FoundBundle]; incomplete: [string[]] }> {
  private timer?: NodeJS.Timeout;
  /** Identities offered, with the directory they were found in (a removed mount forgets its own). */
  private readonly offered = new Map<string, string>();
  private readonly looks = new Map<string, Look>();
  private knownMounts = new Set<string>();
  private labels = new Map<string, string>();
  /** Directories whose count over MAX_BUNDLES_PER_DIR was logged, with that count. */
  private readonly overfull = new Map<string, number>();
  /** Refusals logged, by directory (and set): said once while they stay. */
  private readonly warned = new Map<string, string>();
  private scanning = false;
  /** The files found cut short at the last scan (stable, quiet, no seek table at their end), as last emitted; undefined before the first scan, which always says (a note restored from before a restart is then cleared). */
  private cutShort: string | undefined;
  private readonly quietMs: number;
  private readonly now: () => number;
  /** Filesystem work done so far, for tests and for the bound in SECURITY.md. */
  readonly work = { polls: 0, stats: 0, heads: 0 };

  constructor(private readonly opts: MediaWatcherOptions) {
    super();
    this.quietMs = (opts.quietSeconds ?? DEFAULT_QUIET_SECONDS) * 1000;
    this.now = opts.now ?? Date.now;
  }

  async start(): Promise<void> {
    await this.scan();
    this.timer = setInterval(() => void this.scan(), this.opts.pollSeconds * 1000);
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private async describe(mount: string): Promise<string> {
    if (!this.labels.has(mount)) {
      try {
        const si = await import('systeminformation');
        const devices = await si.default.blockDevices();
        for (const d of devices)
          if (d.mount)
            this.labels.set(
              d.mount,
              `${d.removable || d.protocol === 'usb' ? 'USB stick' : 'disk'} ${d.label || d.name} (${d.mount})`,
            );
      } catch {
        // lsblk missing: the mount point alone names the media
      }
    }
    return this.labels.get(mount) ?? mount;
  }

  async scan(): Promise<void> {
    if (this.scanning) return;
    this.scanning = true;
    try {
      this.work.polls++;
      const text = await readFile(this.opts.mountinfo ?? '/proc/self/mountinfo', 'utf8').catch(
        () => '',
      );
      const mounts = new Set(parseMountinfo(text).filter((m) => under(m, this.opts.roots)));
      for (const m of this.knownMounts) {
        if (!mounts.has(m)) {
          this.opts.log.info('media', `media removed: ${m}`, { mount: m });
          this.labels.delete(m);
          // plugged in again, its bundles are a new request
          for (const [key, dir] of this.offered) if (dir === m) this.offered.delete(key);
          for (const file of this.looks.keys())
            if (file.startsWith(m + sep)) this.looks.delete(file);
          for (const k of this.warned.keys()) if (k.startsWith(m + '#')) this.warned.delete(k);
        }
      }
      for (const m of mounts) {
        if (!this.knownMounts.has(m))
          this.opts.log.info('media', `media mounted: ${m}`, { mount: m });
        await this.scanDir(m, () => this.describe(m), true);
      }
      this.knownMounts = mounts;
      for (const dir of this.opts.watchDirs)
        await this.scanDir(dir, async () => `${DROP_DIRECTORY_MEDIA}${dir}`);
      this.sayCutShort();
    } finally {
      this.scanning = false;
    }
  }

  /** A cut copy left on a stick would otherwise be a journal line only: the status says so while it is there (`incomplete`, [] once gone or changed). */
  private sayCutShort(): void {
    const files = [...this.looks]
      .filter(([, l]) => l.verdict === 'incomplete')
      .map(([f]) => f)
      .sort();
    if (files.join('\n') === this.cutShort) return;
    this.cutShort = files.join('\n');
    this.emit('incomplete', files);
  }

  /** Forgets the files of `dir` not `present`: only files of this directory, as a stick is often mounted below a media root that is a mount too. */
  private forgetLooks(dir: string, present: ReadonlySet<string>): void {
    for (const file of this.looks.keys())
      if (dirname(file) === resolve(dir) && !present.has(file)) this.looks.delete(file);
  }

  private async scanDir(dir: string, media: () => Promise<string>, stick = false): Promise<void> {
    let all: string[];
    try {
      all = await readdir(dir);
    } catch {
      // gone (a watched directory removed): what was seen in it goes too
      this.forgetLooks(dir, new Set());
      return;
    }
    let names = all.filter(isBundleName).sort();
    if (names.length > MAX_BUNDLES_PER_DIR) {
      if (this.overfull.get(dir) !== names.length) {
        this.opts.log.warn(
          'media',
          `${dir} holds ${names.length} *.bundle files: only the first ${MAX_BUNDLES_PER_DIR} by name are looked at; remove the others`,
          { dir },
        );
      }
      this.overfull.set(dir, names.length);
      names = names.slice(0, MAX_BUNDLES_PER_DIR);
    } else {
      this.overfull.delete(dir);
    }
    const present = new Set<string>();
    const found: FoundBundle[] = [];
    for (const n of names) {
      const file = join(dir, n);
      present.add(file);
      let key: string;
      let mtimeMs: number;
      try {
        this.work.stats++;
        const st = await stat(file);
        if (!st.isFile()) continue;
        key = bundleKey(st);
        mtimeMs = st.mtimeMs;
      } catch {
        continue; // vanished between readdir and stat: the media went away
      }
      const head = await this.consider(file, key, mtimeMs);
      if (head) found.push({ file, key, media: await media(), ...head });
    }
    await this.scanPartSets(dir, all, present, media, stick, found);
    this.offerAll(dir, found);
    this.forgetLooks(dir, present);
  }

  /**
   * Each split bundle (NAME.bundle.part-NNN-of-NNN) as one bundle: stable, quiet and offered as a
   * set. On a stick, a set that is not whole is offered as `partial` once stable, its head unread
   * (part 1 may be on another stick): the daemon collects such parts across sticks. In a drop
   * directory it is offered as it is, and the load names the part missing.
   */
  private async scanPartSets(
    dir: string,
    all: string[],
    present: Set<string>,
    media: () => Promise<string>,
    stick: boolean,
    found: FoundBundle[],
  ): Promise<void> {
    const { sets, skipped, refused } = partSets(all);
    this.warnOnce(
      `${dir}#names`,
      refused.length > 0 ? refused.join('/') : undefined,
      () =>
        `${dir}: ${refused.length} part file(s) ignored, e.g. ${JSON.stringify(refused[0])}: ${partNameProblem(refused[0]!)}`,
    );
    if (skipped > 0 && this.overfull.get(`${dir}#parts`) !== skipped) {
      this.opts.log.warn(
        'media',
        `${dir} holds more part files than the ${MAX_PARTS} looked at: ${skipped} are not; remove the ones that do not belong`,
        { dir },
      );
    }
    if (skipped > 0) this.overfull.set(`${dir}#parts`, skipped);
    else this.overfull.delete(`${dir}#parts`);
    for (const parts of sets.values()) {
      const look = await lookAtPartSet(dir, parts, () => this.work.stats++);
      const odd = look && 'notRegular' in look ? look.notRegular : undefined;
      this.warnOnce(
        `${dir}#${parts[0]}`,
        odd,
        () =>
          `${join(dir, odd!)} is not a regular file (a symbolic link or a special file): its set is ignored; copy the part itself onto the stick`,
      );
      if (!look || 'notRegular' in look) continue;
      present.add(look.file);
      const partial = stick && !isWholeSet(parts);
      const head = await this.consider(look.file, look.key, look.mtimeMs, !partial);
      if (head)
        found.push({
          file: look.file,
          key: look.key,
          media: await media(),
          ...head,
          ...(partial ? { partial: { dir, names: parts } } : {}),
        });
    }
  }

  /**
   * What one look at a directory found, offered once per copy (a link or a second name of a file
   * is the same bundle), each delta before the base beside it: the delta's load reads the base,
   * and the daemon drops a base whose delta loaded (after it, the base is an older release); a
   * delta that fails leaves its base to be loaded.
   */
  private offerAll(dir: string, found: FoundBundle[]): void {
    const keys = new Set<string>();
    let left = found.filter((b) => !keys.has(b.key) && keys.add(b.key));
    while (left.length) {
      const wanted = new Set(left.flatMap((b) => (b.base ? [b.base] : [])));
      const ready = left.filter((b) => !b.identity || !wanted.has(b.identity));
      // a cycle cannot be signed into bundle.json digests; should one appear, name order decides
      const now = ready.length ? ready : left;
      for (const b of now) this.offer(dir, b);
      left = left.filter((b) => !now.includes(b));
    }
  }

  /** Logs `line` once while `what` stays the same (undefined: nothing to say, and forgotten). */
  private warnOnce(key: string, what: string | undefined, line: () => string): void {
    if (what === undefined) return void this.warned.delete(key);
    if (this.warned.get(key) === what) return;
    this.warned.set(key, what);
    this.opts.log.warn('media', line());
  }

  /** Whether this look makes the file loadable: with its release when its head reads. */
  private async consider(
    file: string,
    key: string,
    mtimeMs: number,
    readHead = true,
  ): Promise<Pick<FoundBundle, 'release' | 'identity' | 'base'> | undefined> {
    if (this.offered.has(key)) return undefined; // this copy was offered: a rename or a symlink of it is no new bundle
    const now = this.now();
    const prev = this.looks.get(file);
    if (prev?.key !== key) {
      this.looks.set(file, { key, looks: 1, since: now });
      return undefined;
    }
    prev.looks++;
    if (prev.verdict || prev.looks < STABLE_LOOKS) return undefined;
    // a pause shorter than this in a copy that wrote the head and the end first is not taken for the end
    if (now - prev.since < this.quietMs && Date.now() - mtimeMs < this.quietMs) return undefined;
    if (!readHead) return {};
    this.work.heads++;
    const v = await inspectHead(file).catch((err: unknown): HeadVerdict => ({
      kind: 'notABundle',
      why: (err as Error).message,
    }));
    if (v.kind === 'bundle')
      return {
        release: { version: v.version, arch: v.arch },
        identity: v.identity,
        ...(v.base ? { base: v.base } : {}),
      };
    // starts and ends as a bundle, stable and quiet, yet its head does not read: damaged, and the load says so
    if (v.kind === 'damaged') return {};
    prev.verdict = v.kind;
    this.opts.log.warn(
      'media',
      v.kind === 'incomplete'
        ? `${file} is not complete yet (${v.why}): waiting until the copy changes`
        : `${file} is ignored: ${v.why}; it is looked at again when it changes`,
      { file },
    );
    return undefined;
  }

  private offer(dir: string, b: FoundBundle): void {
    this.offered.set(b.key, dir);
    this.emit('bundle', b);
  }
}
