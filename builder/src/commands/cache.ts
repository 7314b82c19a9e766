import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { cacheInfo, lockCache, pruneCache } from '@offline-bundle/image-fetch';
import { formatBytes } from '@offline-bundle/cli';
import { resolve } from 'node:path';
import { stat } from 'node:fs/promises';
import { defaultCacheDir } from '../create.js';

const days = (value: string) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0)
    throw new InvalidArgumentError('must be a number of days, 0 or more');
  return n;
};

/** `bundle cache info|prune`: the blob cache a rerun resumes from, and how to empty it. */
export function addCacheCommands(program: Command): void {
  const cache = program
    .command('cache')
    .description(
      'Show or empty the blob cache "bundle create" downloads into (a rerun resumes from it).',
    );

  cache
    .command('info')
    .description('Where the cache is, how many blobs and bytes it holds, and unfinished downloads.')
    .option('--cache <dir>', 'the cache directory', defaultCacheDir())
    .option('--json', 'print as JSON')
    .action(async (o: { cache: string; json?: boolean }) => {
      const i = await cacheInfo(resolve(o.cache));
      if (o.json) process.stdout.write(JSON.stringify(i) + '\n');
      else
        process.stdout.write(
          `${i.dir}: ${i.blobs} blob${i.blobs === 1 ? '' : 's'}, ${formatBytes(i.bytes)}; ${i.partial} unfinished download${i.partial === 1 ? '' : 's'}, ${formatBytes(i.partialBytes)}\n`,
        );
    });

  cache
    .command('prune')
    .description(
      'Remove unfinished downloads and every blob (or only those unused for --older-than days). The next "bundle create" fetches them again.',
    )
    .option('--cache <dir>', 'the cache directory', defaultCacheDir())
    .option('--older-than <days>', 'keep blobs used (by a create run) within this many days', days)
    .option('--json', 'print as JSON')
    .action(async (o: { cache: string; olderThan?: number; json?: boolean }) => {
      const dir = resolve(o.cache);
      // never under a running create (it holds the cache shared): BUSY instead
      // (a cache that is not there is not made by pruning it)
      const unlock = (await stat(dir).catch(() => undefined))?.isDirectory()
        ? await lockCache(dir, 'exclusive')
        : async () => undefined;
      const r = await pruneCache(
        dir,
        o.olderThan !== undefined ? { olderThanDays: o.olderThan } : {},
      ).finally(unlock);
      if (o.json)
        process.stdout.write(JSON.stringify({ dir, removed: r.files, bytes: r.bytes }) + '\n');
      else
        process.stdout.write(
          `${dir}: removed ${r.files} file${r.files === 1 ? '' : 's'}, ${formatBytes(r.bytes)}\n`,
        );
    });
}
