import { EventEmitter } from 'node:events';
import { readFile, readdir, stat } from 'node:fs/promises';
import { endsWithSeekTable } from '@offline-bundle/format';
import { bundleKey } from './bundle-records.js';
import { join, sep } from 'node:path';
import type { Logger } from './log.js';


export interface FoundBundle {
  file: string;
  /** Human description of where it is: "USB stick LABEL (/media/usb)" or the directory. */
  media: string;
  /** Identity of this copy: a changed file is a new bundle. */
  key: string;
}

/** Mount points from /proc/self/mountinfo (field 5, with octal escapes such as \040 undone). */
export function parseMountinfo(text: string): string[] {
  return text.split('\n').filter(Boolean).map((line) => line.split(' ')[4] ?? '')
    .filter(Boolean).map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))));
}

function under(path: string, roots: string[]): boolean {
  return roots.some((r) => path === r || path.startsWith(r.endsWith(sep) ? r : r + sep));
}

/**
 * `*.bundle` files; a copy in progress is named otherwise by convention (NAME.bundle.partial,
 * or a dot file as rsync and many copy tools write), then renamed into place.
 */
async function bundlesIn(dir: string): Promise<{ file: string; key: string }[]> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return [];
  }
  const out: { file: string; key: string }[] = [];
  for (const n of names.filter((x) => x.endsWith('.bundle') && !x.startsWith('.')).sort()) {
    const file = join(dir, n);
    try {
      const s = await stat(file);
      if (s.isFile()) out.push({ file, key: bundleKey(file, s) });
    } catch {
      // vanished between readdir and stat: the media went away
    }
  }
  return out;
}

export interface MediaWatcherOptions {
  roots: string[];
  watchDirs: string[];
  pollSeconds: number;
  log: Logger;
  mountinfo?: string;
}

/**
 * Finds bundles at the top of newly mounted media under the media roots, and in watched
 * drop directories. The mount table is the signal (polled: it works wherever the OS or the
 * udev rule mounts the stick, with no native addon). A drop-directory file counts once it ends with a bundle's
 * footer and keeps the same size and mtime for two scans, so a copy still in progress (even
 * one that pauses) is not picked up; writers should copy to NAME.bundle.partial and rename.
 */
export class MediaWatcher extends EventEmitter<{ bundle: [FoundBundle] }> {
  private timer?: NodeJS.Timeout;
  private readonly seen = new Set<string>();
  private readonly pending = new Map<string, string>();
  private knownMounts = new Set<string>();
  private labels = new Map<string, string>();
  private scanning = false;

  constructor(private readonly opts: MediaWatcherOptions) {
    super();
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
        for (const d of devices) if (d.mount) this.labels.set(d.mount, `${d.removable || d.protocol === 'usb' ? 'USB stick' : 'disk'} ${d.label || d.name} (${d.mount})`);
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
      const text = await readFile(this.opts.mountinfo ?? '/proc/self/mountinfo', 'utf8').catch(() => '');
      const mounts = new Set(parseMountinfo(text).filter((m) => under(m, this.opts.roots)));
      for (const m of this.knownMounts) {
        if (!mounts.has(m)) {
          this.opts.log.info('media', `media removed: ${m}`, { mount: m });
          this.labels.delete(m);
          for (const k of [...this.seen]) if (k.startsWith(m + sep)) this.seen.delete(k);
        }
      }
      for (const m of mounts) {
        if (!this.knownMounts.has(m)) this.opts.log.info('media', `media mounted: ${m}`, { mount: m });
        for (const b of await bundlesIn(m)) this.offer({ file: b.file, key: b.key, media: await this.describe(m) }, true);
      }
      this.knownMounts = mounts;
      for (const dir of this.opts.watchDirs) {
        for (const b of await bundlesIn(dir)) {
          // a writer that pauses mid-copy leaves a file of stable size: only a complete one counts
          if (!this.seen.has(b.key) && !(await endsWithSeekTable(b.file).catch(() => false))) continue;
          this.offer({ file: b.file, key: b.key, media: dir }, false);
        }
      }
    } finally {
      this.scanning = false;
    }
  }

  private offer(b: FoundBundle, stable: boolean): void {
    if (this.seen.has(b.key)) return;
    if (!stable && this.pending.get(b.file) !== b.key) {
      this.pending.set(b.file, b.key);
      return;
    }
    this.pending.delete(b.file);
    this.seen.add(b.key);
    this.emit('bundle', b);
  }
}
