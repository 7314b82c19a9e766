import { escapeControls } from '@offline-bundle/host';

/** Journald-friendly logs: one event per line, key=value pairs after a readable message. */
type LogFields = Record<string, string | number | boolean | undefined>;

export interface Logger {
  info(event: string, msg: string, fields?: LogFields): void;
  warn(event: string, msg: string, fields?: LogFields): void;
  error(event: string, msg: string, fields?: LogFields): void;
}

function render(level: string, event: string, msg: string, fields: LogFields = {}): string {
  // Messages and values quote file names and bundle strings: escaped, they cannot forge a
  // second journal line or drive the terminal of whoever reads the log.
  const kv = Object.entries(fields)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => [k, escapeControls(String(v))] as const)
    .map(([k, v]) => `${k}=${/[\s"=]/.test(v) ? JSON.stringify(v) : v}`);
  // Syslog priority prefixes let journald set the level when stderr is the journal.
  const prio = level === 'error' ? '<3>' : level === 'warn' ? '<4>' : '<6>';
  return `${process.env.JOURNAL_STREAM ? prio : ''}${escapeControls(msg)} event=${event}${kv.length ? ' ' + kv.join(' ') : ''}`;
}

export function createLogger(
  stream: NodeJS.WritableStream = process.stderr,
  quiet = false,
): Logger {
  const write = (level: string) => (event: string, msg: string, fields?: LogFields) => {
    if (quiet && level === 'info') return;
    stream.write(render(level, event, msg, fields) + '\n');
  };
  return { info: write('info'), warn: write('warn'), error: write('error') };
}
