// A delta's blobs that are listed but not carried come from the base release as this node keeps
// it (a layout kept with staging.keep), or from the base's bundle beside the delta on its stick. Located before anything is written, so a node without
// the base refuses at once; each blob is then hashed to the delta's own signed digest as it is
// copied into the staging (packages/format/src/base-fill.ts), a damaged one refusing the load.
import { lstat, readdir } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import {
  BundleRandomReader,
  baseEntries,
  baseLabel,
  bundleIdentity,
  openBundle,
  parsePartName,
  readHeader,
  withBundle,
  type BaseSource,
  type BundleManifest,
  type BundleSource,
  type LayoutEntry,
} from '@offline-bundle/format';
import { openRegularFile } from '@offline-bundle/host';
import { formatBytes } from '@offline-bundle/cli';
import type { AgentConfig } from '../config.js';
import { AgentError } from '../errors.js';
import type { Logger } from '../log.js';
import { readReleases } from '../state/release-records.js';

/** The one line a node without the base says: which release it needs, and the fix. */
function baseMissing(m: BundleManifest, detail: string): AgentError {
  return new AgentError(
    'BaseMissing',
    `This update needs ${m.base!.version} on this node; plug in the full bundle (it is a delta against ${baseLabel(m.base!)}: ${detail})`,
  );
}

/**
 * Layouts this node keeps, the base's own first: each release record's kept layout (staging.keep)
 * and the directory the base would be staged in. Any of them may hold a blob: they are looked up
 * by digest and held to the delta's signed digests, whichever bundle put them there.
 */
async function keptLayouts(config: AgentConfig, m: BundleManifest): Promise<string[]> {
  const releases = await readReleases(config.paths.stateDir);
  const own = join(config.paths.upgradeDir, `${m.base!.version}-${m.release.arch}`);
  const kept = releases
    .filter((r) => r.layout)
    .sort((a, b) => Number(b.version === m.base!.version) - Number(a.version === m.base!.version))
    .map((r) => r.layout!);
  return [...new Set([own, ...kept])];
}

/** The first of `dirs` holding `entry` as a regular file at its listed size. */
async function holder(dirs: string[], entry: LayoutEntry): Promise<string | undefined> {
  for (const dir of dirs) {
    const st = await lstat(join(dir, entry.path)).catch(() => undefined);
    if (st?.isFile() && st.size === entry.size) return dir;
  }
  return undefined;
}

/** Files looked at beside a delta for its base bundle: a stick holds a few bundles, not thousands (the media watcher looks at as many). */
const MAX_BESIDE = 64;

/**
 * The base's own bundle beside the delta (the same stick or drop directory): a whole
 * `*.bundle` or part 1 of a split one, whose bundle.json is exactly the one the delta names
 * (its head read within the format's limits). Undefined when none is there.
 */
async function baseBundleBeside(file: string, m: BundleManifest): Promise<string | undefined> {
  const dir = dirname(file);
  const own = parsePartName(file)?.base ?? basename(file);
  const names = (await readdir(dir).catch(() => [] as string[]))
    .filter((n) => {
      const part = parsePartName(n);
      return part ? part.n === 1 && part.base !== own : n.endsWith('.bundle') && n !== own;
    })
    .sort()
    .slice(0, MAX_BESIDE);
  for (const n of names) {
    const head = await withBundle(join(dir, n), async (s) => readHeader(s)).catch(() => undefined);
    if (!head || bundleIdentity(head.manifestBytes) !== m.base!.bundleJson) continue;
    // the base is itself a delta: it lacks the blobs it takes from its own base
    if (head.manifest.base)
      throw baseMissing(
        m,
        `${n} beside it is that release, but itself a delta against ${baseLabel(head.manifest.base)}, without the blobs it takes from there`,
      );
    return join(dir, n);
  }
  return undefined;
}

/** Reads base blobs out of the base's bundle, opened at the first blob asked for and closed after the fill. */
function fromBaseBundle(path: string, m: BundleManifest): Required<BaseSource> {
  let opened: Promise<{ source: BundleSource; reader: BundleRandomReader }> | undefined;
  let source: BundleSource | undefined;
  const open = () =>
    (opened ??= (async () => {
      source = await openBundle(path);
      const head = await readHeader(source);
      if (bundleIdentity(head.manifestBytes) !== m.base!.bundleJson)
        throw baseMissing(m, `${path} changed since it was found`);
      return { source, reader: await BundleRandomReader.open(source, head.manifest) };
    })());
  return {
    open: async (e) => {
      const { reader } = await open();
      if (!reader.has(e.path))
        throw baseMissing(m, `${path} does not carry ${e.path} (a delta itself?)`);
      return reader.stream(e.path);
    },
    close: async () => {
      await opened?.catch(() => undefined);
      await source?.close().catch(() => undefined);
    },
  };
}

/**
 * Where each of a delta's base blobs is on this node, found before anything is written: the
 * layouts it keeps, else the base's own bundle beside the delta (`file`); a blob in neither
 * refuses the load (BaseMissing). The source opens each there, refusing a symlink or FIFO put in
 * its place; its bytes are checked by the copy, not here.
 */
export async function locateBase(
  config: AgentConfig,
  m: BundleManifest,
  log: Logger,
  file: string | undefined,
): Promise<BaseSource> {
  const entries = baseEntries(m);
  const dirs = await keptLayouts(config, m);
  const where = new Map<string, string>();
  const missing: LayoutEntry[] = [];
  for (const e of entries) {
    const dir = await holder(dirs, e);
    if (dir) where.set(e.path, dir);
    else missing.push(e);
  }
  const beside = missing.length && file ? await baseBundleBeside(file, m) : undefined;
  if (missing.length && !beside) {
    const bytes = missing.reduce((s, e) => s + e.size, 0);
    throw baseMissing(
      m,
      `${missing.length} of the ${entries.length} blobs it takes from there (${formatBytes(bytes)}) are not kept on this node, and its bundle is not beside this one`,
    );
  }
  const bytes = entries.reduce((s, e) => s + e.size, 0);
  const from = [...new Set(where.values()), ...(beside ? [beside] : [])];
  log.info(
    'staging',
    `a delta against ${baseLabel(m.base!)}: ${entries.length} blobs (${formatBytes(bytes)}) come from ${from.join(', ')}, each checked against this bundle's signed digest`,
  );
  const bundle = beside ? fromBaseBundle(beside, m) : undefined;
  return {
    open: async (e) => {
      const dir = where.get(e.path);
      if (!dir) return bundle!.open(e);
      const path = join(dir, e.path);
      const fh = await openRegularFile(path).catch((err: unknown) => {
        throw baseMissing(m, `${path} went missing (${(err as Error).message})`);
      });
      return fh.createReadStream({ highWaterMark: 1024 * 1024 });
    },
    close: async () => bundle?.close(),
  };
}
