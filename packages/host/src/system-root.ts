import { resolve } from 'node:path';

/**
 * Names a directory that stands for "/" in the system-wide paths the registry client reads
 * (/etc/containers, /etc/docker, /run/containers), as containers/image's
 * RootForImplicitAbsolutePaths does: tests and chroot builds never touch the real /etc.
 * Paths under $HOME are not moved.
 */
export const SYSTEM_ROOT_ENV = 'BUNDLE_SYSTEM_ROOT';

export function systemRoot(env: NodeJS.ProcessEnv = process.env): string {
  const root = env[SYSTEM_ROOT_ENV];
  return root ? resolve(root) : '/';
}
