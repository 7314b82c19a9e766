import { escapeControls } from './safe-text.js';

/**
 * The one error shape of every package: a stable `code` callers branch on (never the
 * message text), an optional cause, and a message that is one line a person can act on.
 */
export class BaseError<Code extends string> extends Error {
  readonly code: Code;
  constructor(code: Code, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/**
 * First non-empty line of a (possibly multi-line) message, trimmed, with control characters
 * made visible: messages quote untrusted names, and this line is what people are shown.
 */
export function firstLine(text: unknown): string {
  const s = text instanceof Error ? text.message : String(text);
  for (const line of s.split(/\r?\n/)) {
    const l = line.trim();
    if (l) return escapeControls(l);
  }
  return '';
}

const REASONS: Record<string, [reason: string, fix: string]> = {
  EACCES: ['permission denied', 'check its owner and permissions, or use another path'],
  EPERM: ['operation not permitted', 'check its owner and permissions, or use another path'],
  ENOTDIR: ['a part of the path is a file, not a directory', 'check the path'],
  ENOENT: ['no such file or directory', 'check the path'],
  EISDIR: ['it is a directory', 'give a file'],
  EEXIST: ['it exists already', 'remove it or use another path'],
  EROFS: ['read-only filesystem', 'use a writable disk'],
  ENOSPC: ['no space left on the device', 'free space there'],
  EDQUOT: ['disk quota exceeded', 'free space there'],
  ENAMETOOLONG: ['the name is too long', 'use a shorter path'],
  ELOOP: ['too many levels of symbolic links', 'check the path'],
  EMFILE: ['too many open files', 'raise the open-file limit (ulimit -n)'],
  EBUSY: ['it is busy', 'try again once it is free'],
  EIO: ['input/output error', 'check the disk (dmesg)'],
};
const VERBS: Record<string, string> = {
  mkdir: 'create the directory',
  open: 'open',
  scandir: 'read the directory',
  opendir: 'read the directory',
  rename: 'rename',
  unlink: 'remove',
  rmdir: 'remove the directory',
  rm: 'remove',
  stat: 'read',
  lstat: 'read',
  read: 'read',
  write: 'write',
  copyfile: 'copy',
  access: 'access',
  utime: 'touch',
  chmod: 'change the mode of',
  fsync: 'sync',
  link: 'link',
  symlink: 'link',
};

/** What a system error code means, in words (the message without the code), for messages of one's own. */
export function errnoReason(code: string | undefined): string {
  return (code && REASONS[code]?.[0]) ?? code ?? 'system error';
}

/**
 * Node's system errors ("EACCES: permission denied, mkdir '/x'") as one line that names the
 * path, the problem and the fix, for callers that print the code beside it (which Node's
 * message repeats). Anything else comes back as it was.
 */
export function describeSystemError(err: unknown): unknown {
  const e = err as NodeJS.ErrnoException & { dest?: string };
  if (
    !(err instanceof Error) ||
    err instanceof BaseError ||
    typeof e.code !== 'string' ||
    typeof e.syscall !== 'string' ||
    !/^E[A-Z0-9]+$/.test(e.code)
  )
    return err;
  const known = REASONS[e.code];
  // an unknown code: Node's own words, without the code in front and the syscall and path behind
  const reason =
    known?.[0] ?? err.message.replace(new RegExp(`^${e.code}: `), '').replace(/, \w+( '.*')*$/, '');
  const verb = VERBS[e.syscall] ?? e.syscall;
  const what = e.path
    ? `cannot ${verb} ${e.path}${e.dest ? ` to ${e.dest}` : ''}`
    : `${e.syscall} failed`;
  const line = `${what}: ${reason}${known ? `; ${known[1]}` : ''}`;
  return Object.assign(new Error(line, { cause: err }), {
    code: e.code,
    errno: e.errno,
    syscall: e.syscall,
    path: e.path,
  });
}
