import { open, readdir, rm, stat } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { KNOWN_ARCHES, OciError, isKnownArch, parsePlatform } from '@offline-bundle/oci';
import { errnoReason, filesystemFree, HostError, makeDirs, pidExists } from '@offline-bundle/host';
import { checkReleaseFields } from '@offline-bundle/format';
import { formatBytes } from '@offline-bundle/cli';
import { didYouMean } from './args.js';

/** What a non-regular, non-directory file is, in words. */
function notAFile(st: Stats): string {
  if (st.isBlockDevice()) return 'a block device';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isFIFO()) return 'a FIFO (named pipe)';
  if (st.isSocket()) return 'a socket';
  return 'something other than a file';
}

/**
 * `NAME.bundle.PID.tmp` (and `NAME.bundle.sha256.PID.tmp`) of a run that was killed (SIGKILL,
 * power cut) hold space the space check counts as taken: removed when that process is gone.
 */
async function removeStaleTemps(output: string): Promise<void> {
  const base = basename(output);
  const names = await readdir(dirname(output)).catch(() => [] as string[]);
  for (const name of names) {
    if (!name.startsWith(`${base}.`) || !name.endsWith('.tmp')) continue;
    const m = /^(?:sha256\.)?(\d+)\.tmp$/.exec(name.slice(base.length + 1));
    if (!m || Number(m[1]) === process.pid || pidExists(Number(m[1]))) continue;
    await rm(join(dirname(output), name), { force: true }).catch(() => undefined);
  }
}

/**
 * Checked before anything is fetched: `-o` names a file (not a directory) in a directory this
 * process can create files in. A probe file, made and removed, is the only reliable test
 * (permissions, read-only mounts, ACLs, full inode tables).
 */
export async function checkOutput(output: string): Promise<void> {
  if (output === '')
    throw new OciError(
      'INVALID_CONFIG',
      "-o is empty: give the bundle's file name, e.g. -o NAME.bundle",
    );
  const st = await stat(output).catch(() => undefined);
  if (st?.isDirectory()) {
    throw new OciError(
      'INVALID_CONFIG',
      `-o ${output} is a directory: give the bundle's file name, e.g. -o ${output.replace(/\/+$/, '')}/NAME.bundle`,
    );
  }
  // the rename would replace a device node, FIFO or socket with a file (-o /dev/sdb), --force or not
  const kind = st && !st.isFile() ? notAFile(st) : undefined;
  if (kind)
    throw new OciError(
      'INVALID_CONFIG',
      `-o ${output} is ${kind}, not a file: write the bundle to a file on the stick's filesystem`,
    );
  const dir = dirname(output);
  await removeStaleTemps(output);
  const probe = `${output}.${process.pid}.tmp`;
  try {
    await makeDirs(dir);
    await (await open(probe, 'wx')).close();
    await rm(probe, { force: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOSPC' || code === 'EDQUOT')
      throw new OciError(
        'NO_SPACE',
        `${dir} is full: free space there or write the bundle elsewhere (-o)`,
        { cause: err },
      );
    if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
      throw new OciError(
        'NOT_WRITABLE',
        `cannot write the bundle into ${dir} (${code === 'EROFS' ? 'read-only filesystem' : 'permission denied'}): choose a writable directory for -o`,
        { cause: err },
      );
    }
    if (err instanceof HostError) throw err;
    throw new OciError(
      'NOT_WRITABLE',
      `cannot write the bundle into ${dir}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}

/**
 * Room for the bundle beside `output` and for the downloads still missing from the cache (on
 * the same filesystem they add up), before anything is fetched. Names the bytes missing.
 */
export async function checkSpace(
  output: string,
  bundleBytes: number,
  cacheDir: string,
  downloadBytes: number,
): Promise<void> {
  const out = await filesystemFree(dirname(output));
  const cache = await filesystemFree(cacheDir);
  const shared = out.dev === cache.dev;
  const needOut = bundleBytes + (shared ? downloadBytes : 0);
  if (out.free < needOut) {
    const what =
      shared && downloadBytes > 0
        ? `the bundle (about ${formatBytes(bundleBytes)}) and the downloads to the cache ${cacheDir} (${formatBytes(downloadBytes)})`
        : `the bundle (about ${formatBytes(bundleBytes)})`;
    // --force replaces the old bundle only once the new one is complete: both must fit until then
    const old = await stat(output).catch(() => undefined);
    const replacing =
      old?.isFile() && out.free + old.size >= needOut
        ? `; the existing ${output} (${formatBytes(old.size)}) is replaced only at the end, once the new bundle is complete, so remove it first`
        : '';
    throw new OciError(
      'NO_SPACE',
      `not enough space in ${dirname(output)} for ${what}: it has ${formatBytes(out.free)} free, ${formatBytes(needOut - out.free)} missing${replacing}; free space there or write to a larger disk (-o${shared && downloadBytes > 0 ? ', --cache' : ''})`,
    );
  }
  if (!shared && cache.free < downloadBytes) {
    throw new OciError(
      'NO_SPACE',
      `not enough space in the blob cache ${cacheDir} for ${formatBytes(downloadBytes)} of downloads: it has ${formatBytes(cache.free)} free, ${formatBytes(downloadBytes - cache.free)} missing; run "bundle cache prune" or pass --cache DIR on a disk with room`,
    );
  }
}

/** Which values a -f file gave (its path, its scalar keys, how many of upgradeFrom come first from it). */
export interface FileKeys {
  file?: string;
  keys?: string[];
  upgradeFrom?: number;
}

/**
 * The release fields given on the command line, held to bundle.json's own rules (the writer
 * checks them again) before anything is fetched: "--version 1.0/evil" must not cost the downloads.
 */
export function checkReleaseOptions(
  o: {
    version?: string | undefined;
    name?: string | undefined;
    arch: string;
    upgradeFrom?: string[] | undefined;
  },
  from: FileKeys = {},
): void {
  // a value the -f file gave is named by its key there, not blamed on a flag nobody typed
  const named = (key: string, flag: string) =>
    from.file && from.keys?.includes(key) ? `${from.file}: ${key}` : flag;
  const option: Record<string, [string, string | undefined, string]> = {
    'release.version': [named('version', '--version'), o.version, 'release version'],
    'release.name': [named('name', '--name'), o.name, 'release name'],
    'release.arch': [named('arch', '--arch'), o.arch, 'architecture'],
  };
  checkReleaseFields(
    { version: o.version, name: o.name, arch: o.arch, upgradeFrom: o.upgradeFrom },
    (field, rule) => {
      const item = /^release\.upgradeFrom\[(\d+)\]$/.exec(field);
      const i = Number(item?.[1]);
      const [flag, value, what] = item
        ? [
            i < (from.upgradeFrom ?? 0) ? `${from.file}: upgradeFrom[${i}]` : '--upgrade-from',
            o.upgradeFrom?.[i],
            'version',
          ]
        : (option[field] ?? [field, undefined, field]);
      // the main error line escapes what JSON leaves (DEL, C1 controls)
      throw new OciError(
        'INVALID_CONFIG',
        `${flag} ${JSON.stringify(value ?? '')} is not a valid ${what}: it ${rule}`,
      );
    },
  );
}

/**
 * The blob cache is a directory this process can create files in, checked before anything is
 * fetched (the default one under $HOME too: an unwritable HOME must not end in a raw EACCES).
 */
export async function checkCacheDir(dir: string, isDefault: boolean): Promise<void> {
  const how = isDefault
    ? 'pass --cache DIR (or set XDG_CACHE_HOME) to a writable directory'
    : 'pass --cache a writable directory';
  const st = await stat(dir).catch(() => undefined);
  if (st && !st.isDirectory())
    throw new OciError('INVALID_CONFIG', `the blob cache ${dir} is not a directory: ${how}`);
  const probe = join(dir, `.probe.${process.pid}.tmp`);
  try {
    await makeDirs(dir);
    await (await open(probe, 'wx')).close();
    await rm(probe, { force: true });
  } catch (err) {
    if (err instanceof HostError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOSPC' || code === 'EDQUOT')
      throw new OciError(
        'NO_SPACE',
        `the blob cache ${dir} is on a full disk: free space there or ${how}`,
        { cause: err },
      );
    throw new OciError(
      'NOT_WRITABLE',
      `cannot use ${dir} as the blob cache (${errnoReason(code)}): ${how}`,
      { cause: err },
    );
  }
}

/**
 * Why an --arch (or arch:) value matches no image, judged before a registry is asked: amd65
 * would otherwise fail only once the first manifest came back. Undefined when it is one.
 */
export function archProblem(value: string): string | undefined {
  let arch: string;
  try {
    arch = parsePlatform(value).architecture;
  } catch (err) {
    return (err as Error).message;
  }
  if (isKnownArch(arch)) return undefined;
  return `${JSON.stringify(value)} is not an architecture images are built for (known: ${KNOWN_ARCHES.join(', ')})${didYouMean(arch, KNOWN_ARCHES)}`;
}
