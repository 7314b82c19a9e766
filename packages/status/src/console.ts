/**
 * The technician's line on the node's own screen: agetty shows every `*.issue` file of
 * `/run/issue.d` above the login prompt (systemd's getty units pass
 * `--issue-file=/etc/issue:/etc/issue.d:/run/issue.d:/usr/lib/issue.d`), so the agent keeps one
 * such file holding the current sentence, replaced atomically and only when the text changes.
 * `/run` is a tmpfs: no line outlives a reboot. A running agetty prints the files again when
 * `/run/agetty.reload` is touched, which is all `agetty --reload` does (util-linux: create the
 * file if missing, set its times to now; agettys watch it with inotify).
 */
import { open, readFile, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { escapeControls, makeDirs, writeFileAtomic } from '@offline-bundle/host';
import type { NodeStatus } from './model.js';
import { technicianLine } from './summary.js';

export const CONSOLE_FILE = 'run/issue.d/bundle-agent.issue';
export const AGETTY_RELOAD_FILE = 'run/agetty.reload';
/** Where agents before 0.2 wrote the line: it survived reboots, so a crash left a stale one. */
export const OLD_CONSOLE_FILE = 'etc/issue.d/bundle-agent.issue';

/** `<root>/run/issue.d/bundle-agent.issue` */
export function consoleFilePath(root = '/'): string {
  return join(root, CONSOLE_FILE);
}

/**
 * The issue file's text for one sentence. Control and bidi characters (a file name on a
 * stick could carry terminal escape sequences) are shown as visible escapes, and backslashes
 * doubled since agetty reads `\x` as its own escapes.
 */
export function consoleText(line: string): string {
  const clean = escapeControls(line).replace(/\s+/g, ' ').trim();
  return `Update: ${clean.replace(/\\/g, '\\\\')}\n\n`;
}

/** What `agetty --reload` does: running agettys print the issue files again. */
export async function reloadAgetty(root = '/'): Promise<void> {
  const fh = await open(join(root, AGETTY_RELOAD_FILE), 'a', 0o600);
  try {
    const now = new Date();
    await fh.utimes(now, now);
  } finally {
    await fh.close();
  }
}

/** Removes the line an older agent left in /etc/issue.d, only when it holds one of our lines. */
export async function removeOldConsoleFile(root = '/'): Promise<boolean> {
  const file = join(root, OLD_CONSOLE_FILE);
  const text = await readFile(file, 'utf8').catch(() => undefined);
  if (text === undefined || !text.startsWith('Update: ')) return false;
  await rm(file, { force: true });
  return true;
}

export interface ConsoleWriterOptions {
  /** Every path (the issue file, agetty's reload file) is under it. Default "/". */
  root?: string;
  /** Called after each write (and agetty's reload), and with errors. */
  onWritten?: (text: string) => void;
  onError?: (err: unknown) => void;
}

export class ConsoleWriter {
  readonly path: string;
  private last: string | undefined;
  private loaded = false;
  private chain: Promise<unknown> = Promise.resolve();
  private readonly onWritten: ((text: string) => void) | undefined;
  private readonly onError: ((err: unknown) => void) | undefined;
  private readonly root: string;

  constructor(opts: ConsoleWriterOptions = {}) {
    this.root = opts.root ?? '/';
    this.path = consoleFilePath(this.root);
    this.onWritten = opts.onWritten;
    this.onError = opts.onError;
  }

  /**
   * Writes `line` (a technician sentence) unless the file already holds it. Resolves true when
   * the file was written. Calls are serialized.
   */
  write(line: string): Promise<boolean> {
    const p = this.chain.then(() => this.writeNow(line));
    this.chain = p.catch(() => undefined);
    return p;
  }

  /** A StatusTracker sink: `tracker.onChange(consoleWriter.sink)`. Never throws; errors go to onError. */
  readonly sink = (s: NodeStatus): void => {
    this.write(s.message || technicianLine(s)).catch((err) => this.onError?.(err));
  };

  /** Resolves once every write asked for so far is done. */
  async idle(): Promise<void> {
    await this.chain;
  }

  private async writeNow(line: string): Promise<boolean> {
    const text = consoleText(line);
    if (!this.loaded) {
      // After a restart, do not rewrite a file that already says the same.
      this.last = await readFile(this.path, 'utf8').catch(() => undefined);
      this.loaded = true;
      if (await removeOldConsoleFile(this.root))
        await reloadAgetty(this.root).catch(() => undefined);
    }
    if (text === this.last) return false;
    await makeDirs(dirname(this.path));
    await writeFileAtomic(this.path, text, 0o644);
    this.last = text;
    // no agetty on this node (a container without /run bound in) is no reason to fail the write
    await reloadAgetty(this.root).catch(() => undefined);
    this.onWritten?.(text);
    return true;
  }
}
