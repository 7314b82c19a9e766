// Byte-for-byte repeatable tarballs for `pnpm package` (the agent and builder tarballs, the
// agent image's layers): the same inputs give the same sha256 on every machine.
import { execFileSync } from 'node:child_process';

/** Deterministic tar (GNU tar) of `names` under `cwd`; gzip -9n when `gzip`. */
export function reproducibleTar(cwd, names, out, epoch, { gzip = true, prefix } = {}) {
  const args = [
    '--sort=name',
    '--format=posix',
    '--owner=0',
    '--group=0',
    '--numeric-owner',
    `--mtime=@${epoch}`,
    '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
    '-C',
    cwd,
  ];
  if (prefix) args.push(`--transform=s,^,${prefix},S`);
  args.push('-cf', '-', ...names);
  const cmd = `tar ${args.map(shq).join(' ')}${gzip ? ' | gzip -9n' : ''} > ${shq(out)}`;
  execFileSync('bash', ['-o', 'pipefail', '-c', cmd], { stdio: ['ignore', 'inherit', 'inherit'] });
}

export function shq(s) {
  return `'${String(s).replace(/'/g, `'\\''`)}'`;
}
