// The commands `bundle-agent collect` runs (journalctl, the runtime's own CLI): each bounded in
// time (COLLECT_COMMAND_MS) and in size (MAX_COLLECT_ENTRY_BYTES), never a reason to fail.
import { spawn } from 'node:child_process';
import { MAX_COLLECT_ENTRY_BYTES, type CollectArchive } from './collect-archive.js';

/** How long journalctl, the runtime's image list and each runtime command may take. */
export const COLLECT_COMMAND_MS = 10_000;

export const errLine = (err: unknown) => (err as Error).message?.split('\n')[0] ?? String(err);

export interface Ran {
  /** What it wrote on stdout (at most MAX_COLLECT_ENTRY_BYTES); '' when it could not run. */
  text: string;
  /** Its exit code; null when killed (time or size) or never started. */
  code: number | null;
  /** It started (a kill for time or size still counts: what it wrote is kept). */
  started: boolean;
  /** The program is not on PATH (ENOENT). */
  missing: boolean;
  /** Why it did not run or did not end well, one line (its stderr's first line when it failed). */
  problem?: string;
}

/**
 * Runs `argv` and returns what it wrote. A command that outlasts COLLECT_COMMAND_MS is killed
 * (noted as `name`'s, its output kept); one that writes more than the bound is cut; all are
 * killed at collect's deadline.
 */
function runBounded(a: CollectArchive, name: string, argv: string[]): Promise<Ran> {
  return new Promise((done) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let stderr = '';
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    const timer = setTimeout(() => {
      a.note(
        `${name}: ${argv[0]} gave no end within ${COLLECT_COMMAND_MS} ms; what it wrote is kept`,
      );
      child.kill('SIGKILL');
    }, COLLECT_COMMAND_MS);
    const late = () => child.kill('SIGKILL');
    a.deadline.addEventListener('abort', late, { once: true });
    if (a.deadline.aborted) late();
    child.stdout.on('data', (b: Buffer) => {
      if (size < MAX_COLLECT_ENTRY_BYTES) chunks.push(b);
      size += b.length;
      if (size >= MAX_COLLECT_ENTRY_BYTES) child.kill('SIGKILL');
    });
    child.stderr.on('data', (b: Buffer) => {
      if (stderr.length < 4096) stderr += b.toString('utf8');
    });
    child.on('error', (err) => {
      clearTimeout(timer);
      a.deadline.removeEventListener('abort', late);
      const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
      done({
        text: '',
        code: null,
        started: false,
        missing,
        problem: missing ? `not found on PATH (${errLine(err)})` : errLine(err),
      });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      a.deadline.removeEventListener('abort', late);
      const why = stderr.split('\n').find((l) => l.trim() !== '') ?? 'nothing on stderr';
      done({
        text: Buffer.concat(chunks).toString('utf8'),
        code,
        started: true,
        missing: false,
        ...(code ? { problem: `exited ${code}: ${why}` } : {}),
      });
    });
  });
}

/** A command's output; one that cannot start is noted as `name`'s unless `quiet` (the caller says it better). */
export async function commandOutput(
  a: CollectArchive,
  name: string,
  argv: string[],
  o: { quiet?: boolean } = {},
): Promise<Ran> {
  const r = await runBounded(a, name, argv);
  if (!r.started && !o.quiet) a.note(`${name}: cannot run ${argv[0]}: ${r.problem}`);
  return r;
}
