// The archive `bundle-agent collect` writes: every entry text, redacted once more on the way in
// (whatever a source forgot), each and all together bounded, written to a temporary name and
// renamed, so a half-written archive is never mistaken for a whole one.
import { createWriteStream } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { randomBytes } from 'node:crypto';
import tar from 'tar-stream';
import { syncDirBestEffort } from '@offline-bundle/host';
import { redactText, tallyLine, type RedactionTally } from './collect-redact.js';

/** Most bytes one entry keeps (its tail is cut, saying so). */
export const MAX_COLLECT_ENTRY_BYTES = 4 * 1024 * 1024;
/** Most bytes the whole archive holds before compression; later entries are left out, saying so. */
export const MAX_COLLECT_TOTAL_BYTES = 32 * 1024 * 1024;

export class CollectArchive {
  private readonly entries: { name: string; body: Buffer }[] = [];
  private total = 0;
  /** What was left out or cut, and why: written as NOTES.txt. */
  readonly notes: string[] = [];
  /** What was redacted, per entry and rule (counts, never values): written in NOTES.txt too. */
  readonly redactions: string[] = [];

  /** Written: a part left behind at the deadline (collect-steps.ts) adds nothing after. */
  private sealed = false;

  /** `deadline`: aborts when collect's time is up; the commands it runs are killed then. */
  constructor(
    readonly prefix: string,
    readonly deadline: AbortSignal = new AbortController().signal,
  ) {}

  /** Adds a text entry, redacted and bounded; `tally` holds what was redacted of it before (a parsed document's keys). */
  add(name: string, text: string, tally: RedactionTally = new Map()): void {
    if (this.sealed) return;
    let body = Buffer.from(redactText(text, tally), 'utf8');
    const redacted = tallyLine(name, tally);
    if (redacted) this.redactions.push(redacted);
    if (body.length > MAX_COLLECT_ENTRY_BYTES) {
      body = Buffer.concat([
        body.subarray(0, MAX_COLLECT_ENTRY_BYTES),
        Buffer.from(`\n[cut at ${MAX_COLLECT_ENTRY_BYTES} bytes]\n`),
      ]);
      this.notes.push(`${name}: cut at ${MAX_COLLECT_ENTRY_BYTES} bytes`);
    }
    if (this.total + body.length > MAX_COLLECT_TOTAL_BYTES) {
      this.notes.push(
        `${name}: left out (the archive holds at most ${MAX_COLLECT_TOTAL_BYTES} bytes)`,
      );
      return;
    }
    this.total += body.length;
    this.entries.push({ name, body });
  }

  note(line: string): void {
    if (!this.sealed) this.notes.push(line);
  }

  get files(): number {
    return this.entries.length + 1;
  }

  /** Writes the .tar.gz at `output` (mode 0600: it describes the node) through a temporary name. */
  async write(output: string, mtime: Date): Promise<void> {
    this.sealed = true;
    const tmp = join(dirname(output), `.${basename(output)}.${randomBytes(4).toString('hex')}.tmp`);
    const pack = tar.pack();
    const redacted = this.redactions.length
      ? `\nredacted (each value replaced by <redacted>; by entry, how many by which rule):\n${this.redactions.join('\n')}\n`
      : '\nnothing redacted\n';
    const all = [
      ...this.entries,
      {
        name: 'NOTES.txt',
        body: Buffer.from(
          `${this.notes.length ? `${this.notes.join('\n')}\n` : 'nothing left out\n'}${redacted}`,
        ),
      },
    ];
    try {
      const writing = pipeline(
        pack,
        createGzip(),
        createWriteStream(tmp, { flags: 'wx', mode: 0o600 }),
      );
      for (const e of all)
        pack.entry(
          { name: `${this.prefix}/${e.name}`, size: e.body.length, mode: 0o600, mtime },
          e.body,
        );
      pack.finalize();
      await writing;
      await rename(tmp, output);
      await syncDirBestEffort(dirname(output));
    } catch (err) {
      pack.destroy();
      await rm(tmp, { force: true });
      throw err;
    }
  }
}
