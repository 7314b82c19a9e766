import { dirname, resolve } from 'node:path';
import type { Command } from 'commander';
import { OciError } from '@offline-bundle/oci';
import { readBundleFile } from './bundle-file.js';
import { MAX_RELEASE_PATH_HOPS } from '@offline-bundle/format';
import { plural } from '@offline-bundle/cli';
import {
  readUpdateGraph,
  resolvePath,
  resolveRelease,
  type PathHop,
  type ResolvedRelease,
} from './update-graph.js';
import { someOf, type BundleFile, type ReleaseByChannel } from './schema.js';

/** create's options as commander gives them: its flags' camelCase names. */
export type CreateFlags = Record<string, unknown> & {
  file?: string;
  image?: string[];
  chart?: string[];
  release?: string;
  updateGraph?: string;
  /** --release-from: the version the cluster runs, where the release's update path starts. */
  releaseFrom?: string;
  /** The releases of the path before the release (oldest first), as the graph resolved them. */
  releaseVia?: PathHop[];
  dryRun?: boolean;
};

/** The file's lists and the flags they add to. */
const LISTS = {
  images: 'image',
  charts: 'chart',
  upgradeFrom: 'upgradeFrom',
  releaseSignatures: 'releaseSignature',
} as const;

interface FromFile {
  /** Where each image of options.image comes from: "bundle.yaml:7 (images[0])" or "--image #1". */
  imageWhere: string[];
  /** Where each chart of options.chart comes from: "bundle.yaml:9 (charts[0])" or "--chart #1". */
  chartWhere: string[];
  /** The release a channel named, when it did. */
  channelRelease?: ResolvedRelease & { channel: string; path?: PathHop[] };
}

const GRAPH_HINT =
  "the graph service's JSON answer: curl -H 'Accept: application/json' 'https://api.openshift.com/api/upgrades_info/v1/graph?channel=CHANNEL&arch=amd64' > graph.json";

async function releaseFromChannel(
  r: ReleaseByChannel,
  graphFlag: string | undefined,
  where: string,
): Promise<ResolvedRelease & { channel: string; path?: PathHop[] }> {
  const file = graphFlag ?? r.updateGraph;
  if (!file)
    throw new OciError(
      'INVALID_CONFIG',
      `${where}: channel ${r.channel} is resolved against an update graph the engineer provides: give --update-graph FILE (or release.updateGraph), ${GRAPH_HINT}`,
    );
  const graph = await readUpdateGraph(file);
  const chosen = resolveRelease(graph, r, where);
  // a path of one hop is a bundle of one release, as without from
  const path =
    r.from === undefined
      ? undefined
      : resolvePath(graph, r.channel, r.from, chosen.version, MAX_RELEASE_PATH_HOPS, where);
  return { channel: r.channel, ...chosen, ...(path && path.length > 1 ? { path } : {}) };
}

const FROM_HINT =
  "a release named by channel in the -f file (release: {channel, version, from, updateGraph}, or an ImageSetConfiguration channel with shortestPath): the path is the update graph's";

/** A scalar key of the file, unless its flag was given on the command line. */
function takeScalars(o: CreateFlags, f: BundleFile, cmd: Command): void {
  for (const [key, value] of Object.entries(f)) {
    if (key === 'release' || Object.hasOwn(LISTS, key) || value === undefined) continue;
    if (cmd.getOptionValueSource(key) !== 'cli') o[key] = value;
  }
}

/**
 * Folds `-f FILE` into create's flags: a flag given on the command line overrides the file's
 * key, a repeatable one (--image, --upgrade-from, --release-signature) adds to the file's list,
 * and a release named by channel is resolved against the update graph. `log` gets the file's
 * warnings and the release chosen.
 */
export async function applyBundleFile(
  o: CreateFlags,
  cmd: Command,
  log: (message: string) => void,
): Promise<FromFile> {
  const cliImages = (o.image ?? []).map((_, i) => `--image #${i + 1}`);
  const cliCharts = (o.chart ?? []).map((_, i) => `--chart #${i + 1}`);
  if (!o.file) {
    if (o.updateGraph !== undefined)
      throw new OciError(
        'INVALID_CONFIG',
        '--update-graph goes with -f: a file naming its release by channel',
      );
    if (o.releaseFrom !== undefined)
      throw new OciError('INVALID_CONFIG', `--release-from goes with -f: ${FROM_HINT}`);
    return { imageWhere: cliImages, chartWhere: cliCharts };
  }
  // a value a flag replaces is not the run's, nor a key's where nothing is signed (a dry run, diff): its mistakes are not reported
  const signs = !o.dryRun && cmd.options.some((opt) => opt.attributeName() === 'key');
  const loaded = await readBundleFile(
    o.file,
    (key) =>
      cmd.getOptionValueSource(key) === 'cli' ||
      (!signs && (key === 'key' || key === 'passphraseFile')),
  );
  for (const w of loaded.warnings) log(`warning: ${w}`);
  const f = loaded.file;
  takeScalars(o, f, cmd);
  o.fileKeys = {
    file: o.file,
    keys: Object.keys(f).filter((k) => cmd.getOptionValueSource(k) !== 'cli'),
    upgradeFrom: f.upgradeFrom?.length ?? 0,
  };
  // the lines of the file's imagesFile name paths from the file's directory, as its images: do
  if (f.imagesFile !== undefined && cmd.getOptionValueSource('imagesFile') !== 'cli')
    o.imagesFileBase = dirname(resolve(o.file));
  for (const [key, flag] of Object.entries(LISTS)) {
    const fromFile = f[key as keyof typeof LISTS];
    if (fromFile?.length) o[flag] = [...fromFile, ...((o[flag] as string[] | undefined) ?? [])];
  }
  const out: FromFile = {
    imageWhere: [...loaded.imagesWhere, ...cliImages],
    chartWhere: [...(loaded.chartsWhere ?? []), ...cliCharts],
  };
  const byChannel = cmd.getOptionValueSource('release') !== 'cli' && typeof f.release === 'object';
  if (o.updateGraph !== undefined && !byChannel)
    throw new OciError(
      'INVALID_CONFIG',
      "--update-graph goes with a release named by channel in the -f file (release: {channel: ...}, or an ImageSetConfiguration's platform.channels)",
    );
  if (o.releaseFrom !== undefined && !byChannel)
    throw new OciError('INVALID_CONFIG', `--release-from goes with ${FROM_HINT}`);
  if (cmd.getOptionValueSource('release') === 'cli' || f.release === undefined) return out;
  if (typeof f.release === 'string') {
    o.release = f.release;
    return out;
  }
  const from = o.releaseFrom ?? f.release.from;
  const chosen = await releaseFromChannel(
    { ...f.release, ...(from !== undefined ? { from } : {}) },
    o.updateGraph,
    loaded.releaseWhere ?? o.file,
  );
  o.release = chosen.payload;
  log(`release ${chosen.version} of channel ${chosen.channel}: ${chosen.payload}`);
  // the graph's edge from it makes it an upgrade source of the first hop
  if (from !== undefined) o.releaseFrom = from;
  if (chosen.path) {
    o.releaseVia = chosen.path.slice(0, -1);
    log(
      `update path ${[from, ...chosen.path.map((h) => h.version)].join(' → ')}: ${plural(chosen.path.length, 'release')} carried, each payload once`,
    );
  }
  if (chosen.skipped.length)
    log(
      `warning: a bundle carries one release, the newest in range: ${someOf(chosen.skipped)} left out (a bundle each, with version:)`,
    );
  out.channelRelease = chosen;
  return out;
}

/** --key and -o, from the command line or the file; a dry run needs neither. A usage error (exit 2) as commander's own. */
export function requireKeyAndOutput(o: CreateFlags, cmd: Command): void {
  if (o.dryRun) return;
  for (const [key, flag] of [
    ['key', '--key <file>'],
    ['output', '-o, --output <file>'],
  ] as const) {
    if (o[key] === undefined)
      cmd.error(
        `error: required option '${flag}' not specified (give it, or ${key}: in the -f file)`,
        { exitCode: 2, code: 'commander.missingMandatoryOptionValue' },
      );
  }
}
