/**
 * The technician's line on the node's own screen: agetty shows every `/etc/issue.d/*.issue`
 * above the login prompt, so the agent keeps one such file holding the current sentence,
 * replaced atomically and only when the text changes. (agetty reads it when it prints the
 * prompt; `agetty --reload` makes running gettys print it again.)
 */
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { escapeControls, makeDirs, writeFileAtomic } from '@offline-bundle/oci';
import type { NodeStatus } from './model.js';
import { technicianLine } from './summary.js';

export const CONSOLE_FILE = 'etc/issue.d/bundle-agent.issue';

/** `<root>/etc/issue.d/bundle-agent.issue` */
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

export interface ConsoleWriterOptions {
  /** The issue file; default consoleFilePath(root). */
  path?: string;
  /** Prefix for the default path. Default "/". */
  root?: string;
  /** Called after each write (e.g. to run `agetty --reload`), and with errors. */
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

  constructor(opts: ConsoleWriterOptions = {}) {
    this.path = opts.path ?? consoleFilePath(opts.root);
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
    }
    if (text === this.last) return false;
    await makeDirs(dirname(this.path));
    await writeFileAtomic(this.path, text, 0o644);
    this.last = text;
    this.onWritten?.(text);
    return true;
  }
}
