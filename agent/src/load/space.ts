import { filesystemFree } from '@offline-bundle/host';
import type { BundleBlob, BundleManifest } from '@offline-bundle/format';
import { type BundleMode } from '@offline-bundle/status';
import { formatBytes } from '@offline-bundle/cli';
import type { AgentConfig, RuntimeKind } from '../config.js';
import { AgentError } from '../errors.js';
import {
  imageGcKeepBytes,
  kubeletUsagePercent,
  readKubeletThresholds,
  thresholdBytes,
  thresholdText,
  type KubeletThresholds,
  type Threshold,
} from './kubelet-thresholds.js';
import { heldLayers, type HeldLayers } from './space-held.js';

/** The status model's bundle mode: one list of modes for the status, the CRD and the planner. */
export type StageMode = BundleMode;

/** A filesystem as statfs sees it: `free` is what the kubelet calls available. */
interface Filesystem {
  free: number;
  size: number;
  dev: number;
}

/** What the load adds to the image store, with the part its layers already there save. */
interface ImageGrowth {
  bytes: number;
  heldBytes: number;
  heldLayers: number;
  unknown?: string;
}

const isLayer = (b: BundleBlob) => /layer|rootfs/.test(b.mediaType);
const isCompressed = (b: BundleBlob) => /gzip|zstd/.test(b.mediaType);

/**
 * The image store's growth: a layer shared by several images counts once; a layer the store holds already counts nothing. Compressed layers unpack
 * by the ratio the builder measured (imageStoreBytes over their compressed bytes); containerd
 * also keeps the compressed blob in its content store.
 */
export function imageGrowth(
  m: BundleManifest,
  held: HeldLayers,
  runtime: RuntimeKind,
): ImageGrowth {
  // bundle.json lists a blob once; a listing that repeated one still costs it once
  const blobs = [...new Map(m.blobs.map((b) => [b.digest, b])).values()];
  let compressed = 0;
  let other = 0;
  for (const b of blobs) {
    if (isLayer(b) && isCompressed(b)) compressed += b.size;
    else other += b.size;
  }
  const ratio = compressed > 0 ? Math.max(1, (m.totals.imageStoreBytes - other) / compressed) : 1;
  const cost = (b: BundleBlob) =>
    isLayer(b) && isCompressed(b)
      ? Math.ceil(b.size * ratio) + (runtime === 'containerd' ? b.size : 0)
      : b.size;
  let bytes = 0;
  let heldBytes = 0;
  let heldCount = 0;
  for (const b of blobs) {
    if (isLayer(b) && held.held.has(b.digest)) {
      heldBytes += cost(b);
      heldCount++;
    } else {
      bytes += cost(b);
    }
  }
  return {
    bytes,
    heldBytes,
    heldLayers: heldCount,
    ...(held.unknown ? { unknown: held.unknown } : {}),
  };
}

/** One filesystem's share of a load: what is written to it and which kubelet limits watch it. */
interface Demand {
  dir: string;
  fs: Filesystem;
  staging: number;
  /** Of `staging`, the bytes of this bundle already there (a resumed staging): not written again. */
  staged: number;
  images: number;
  imageFs: boolean;
  nodeFs: boolean;
}

/** A filesystem the load does not fit on: the sentence saying why, and the bytes to free. */
interface Shortfall {
  why: string;
  free: number;
}

/** The eviction limit that binds on a signal: the stricter (more bytes kept) of evictionHard and evictionSoft. */
function evictionLimit(
  hard: Threshold,
  soft: Threshold | undefined,
  size: number,
): { keep: number; field: string; th: Threshold } {
  const h = { keep: thresholdBytes(hard, size), field: 'evictionHard', th: hard };
  if (!soft) return h;
  const s = { keep: thresholdBytes(soft, size), field: 'evictionSoft', th: soft };
  return s.keep > h.keep ? s : h;
}

/**
 * Whether `d` fits: its free bytes cover the load plus the reserve, and afterwards the kubelet's
 * image GC high threshold (image filesystem) and eviction thresholds (imagefs, nodefs; hard or
 * soft, whichever is stricter) are not crossed, each computed as the kubelet computes it.
 * Undefined when it fits; else the worst shortfall.
 */
export function shortfall(d: Demand, reserve: number, k: KubeletThresholds): Shortfall | undefined {
  const need = d.staging - d.staged + d.images;
  const left = d.fs.free - need;
  const found: Shortfall[] = [];
  if (left < reserve)
    found.push({ why: `it has ${formatBytes(d.fs.free)} free`, free: reserve - left });
  // 100 turns the kubelet's image GC off
  if (d.imageFs && k.gcHighPercent < 100) {
    const keep = imageGcKeepBytes(d.fs.size, k.gcHighPercent);
    const usage = Math.min(100, kubeletUsagePercent(left, d.fs.size));
    if (left < keep)
      found.push({
        why: `after it the kubelet would see the filesystem ${usage}% full, at or above its image GC threshold of ${k.gcHighPercent}% (the kubelet would delete images)`,
        free: keep - left,
      });
  }
  const signals: [boolean, string, Threshold, Threshold | undefined][] = [
    [d.imageFs, 'imagefs.available', k.imagefsAvailable, k.imagefsSoft],
    [d.nodeFs, 'nodefs.available', k.nodefsAvailable, k.nodefsSoft],
  ];
  for (const [applies, signal, hard, soft] of signals) {
    const limit = evictionLimit(hard, soft, d.fs.size);
    const after =
      limit.field === 'evictionSoft'
        ? 'the kubelet would evict pods after its grace period'
        : 'the kubelet would evict pods';
    if (applies && left < limit.keep)
      found.push({
        why: `after it ${formatBytes(Math.max(0, left))} would be left, under the kubelet's ${limit.field} threshold ${signal} < ${thresholdText(limit.th)} (${after})`,
        free: limit.keep - left,
      });
  }
  return found.sort((a, b) => b.free - a.free)[0];
}

/** "21.3 GB on DIR (8.1 GB staging + 12.2 GB images + 1.1 GB reserve)". */
function needText(d: Demand, reserve: number, g: ImageGrowth): string {
  const staging = d.staging
    ? `${formatBytes(d.staging)} staging${d.staged ? `, ${formatBytes(d.staged)} of it already staged` : ''}`
    : '';
  const parts = [
    staging,
    d.images ? `${formatBytes(d.images)} images` : '',
    `${formatBytes(reserve)} reserve`,
  ].filter(Boolean);
  const saved =
    d.images && g.heldLayers
      ? `; ${g.heldLayers} layers, ${formatBytes(g.heldBytes)}, are in the store already`
      : '';
  return `${formatBytes(d.staging - d.staged + d.images + reserve)} on ${d.dir} (${parts.join(' + ')}${saved})`;
}

/** Each filesystem the load writes to, once: staging (when staged) and the images may share one. */
export function demands(
  fss: { upgrade: Filesystem; store: Filesystem; kubelet: Filesystem },
  dirs: { upgrade: string; store: string },
  layout: number,
  images: number,
  staged = 0,
): Demand[] {
  const store: Demand = {
    dir: dirs.store,
    fs: fss.store,
    staging: 0,
    staged: 0,
    images,
    imageFs: true,
    nodeFs: fss.store.dev === fss.kubelet.dev,
  };
  if (layout === 0) return [store];
  const already = Math.min(Math.max(0, staged), layout);
  if (fss.upgrade.dev === fss.store.dev) return [{ ...store, staging: layout, staged: already }];
  return [
    {
      dir: dirs.upgrade,
      fs: fss.upgrade,
      staging: layout,
      staged: already,
      images: 0,
      imageFs: false,
      nodeFs: fss.upgrade.dev === fss.kubelet.dev,
    },
    store,
  ];
}

/**
 * The agent's own leftovers, which a check on statfs alone would count as used: bytes on the
 * upgrade filesystem it deletes before writing (other bundles' partial staging), and bytes of
 * this bundle already staged that are not written again.
 */
export interface SpaceCredit {
  reclaimableBytes?: number;
  alreadyStagedBytes?: number;
}

/** The filesystems as they will be once the agent's reclaimable leftovers are gone. */
function afterReclaim(fss: SpaceInputs['fs'], reclaimable: number): SpaceInputs['fs'] {
  const up = fss.upgrade.dev;
  const credit = (f: Filesystem): Filesystem =>
    f.dev === up ? { ...f, free: Math.min(f.size, f.free + reclaimable) } : f;
  return { upgrade: credit(fss.upgrade), store: credit(fss.store), kubelet: credit(fss.kubelet) };
}

interface SpaceInputs {
  fs: { upgrade: Filesystem; store: Filesystem; kubelet: Filesystem };
  growth: ImageGrowth;
  kubelet: KubeletThresholds;
  credit?: SpaceCredit;
}

/** What a space check found, as figures: the room a staged layout needs, the images' growth, what the figures rest on. */
interface SpaceFigures {
  layoutBytes: number;
  /** Of layoutBytes, this bundle's own partial staging: not written again. */
  alreadyStagedBytes: number;
  reclaimableBytes: number;
  growth: ImageGrowth;
  /** Where the kubelet's thresholds were read. */
  thresholdsFrom: string;
}

/** The plan: staged on disk or served from the media, with the sentence for the status and log (in the origin's words). */
export interface SpacePlan {
  mode: StageMode;
  message: string;
  figures: SpaceFigures;
}

/** The filesystem that refuses the load: its demand, the sentence saying why, the bytes to free. */
interface SpaceShortfall {
  dir: string;
  needText: string;
  why: string;
  freeBytes: number;
  figures: SpaceFigures;
  delta?: string;
}

/**
 * How an origin of the bundle's bytes says a space verdict: a stick is plugged in again, a fetch
 * from peers is tried again; a stick may be served from, peers may not (`media` undefined).
 */
export interface SpaceWords {
  /** Before the refusal's sentence, naming what was refused ("bundle 1.2 is not fetched from peers: "). */
  lead?: string;
  /** After "free N on DIR": what the admin does next (" and plug the stick in again"). */
  again: string;
  /** After the thresholds' basis: what happens next on its own ("; the fetch is tried again later"). */
  after?: string;
  /** How serving from the media is said; undefined: this origin is staged or not loaded. */
  media?: string;
}

export const STICK_WORDS: SpaceWords = {
  again: ' and plug the stick in again',
  media: 'serving from the media: keep the USB stick in until Ready',
};

/** A load refused for space: the AgentError every caller reports, with the figures behind it. */
export class SpaceRefused extends AgentError {
  constructor(
    readonly shortfall: SpaceShortfall,
    words: SpaceWords,
  ) {
    super('InsufficientSpace', refusalText(shortfall, words));
  }
}

function basisText(f: SpaceFigures): string {
  const reclaimed = f.reclaimableBytes
    ? `; counting ${formatBytes(f.reclaimableBytes)} of partial staging the agent removes first as free`
    : '';
  return `thresholds from ${f.thresholdsFrom}${f.growth.unknown ? `; every layer counted as new (${f.growth.unknown})` : ''}${reclaimed}`;
}

function imagesText(g: ImageGrowth): string {
  return `${formatBytes(g.bytes)} of images${g.heldLayers ? ` (${formatBytes(g.heldBytes)} of layers already in the store not counted)` : ''}`;
}

function refusalText(s: SpaceShortfall, w: SpaceWords): string {
  const what = s.delta
    ? `this delta is staged whole, the blobs filled from ${s.delta} too, and needs`
    : 'loading needs';
  const hint = s.delta ? '' : ' (e.g. remove unused images)';
  return `${w.lead ?? ''}not enough disk space: ${what} ${s.needText}; ${s.why}; free ${formatBytes(s.freeBytes)} on ${s.dir}${hint}${w.again} (${basisText(s.figures)})${w.after ?? ''}`;
}

/** The sentence of a plan, in the origin's words; a media plan for an origin that cannot be served from (`words.media` undefined) says why it is not staged. */
export function planText(
  p: Pick<SpacePlan, 'mode' | 'figures'>,
  words: SpaceWords = STICK_WORDS,
): string {
  const f = p.figures;
  if (p.mode === 'staged') {
    const already = f.alreadyStagedBytes
      ? ` (${formatBytes(f.alreadyStagedBytes)} of it already staged)`
      : '';
    return `room for ${formatBytes(f.layoutBytes)} of layout${already} and ${imagesText(f.growth)}; ${basisText(f)}`;
  }
  const noRoom = `not enough room to copy the bundle (${formatBytes(f.layoutBytes)})`;
  return words.media
    ? `${noRoom}; ${words.media} (${imagesText(f.growth)}; ${basisText(f)})`
    : noRoom;
}

/**
 * Chooses where the layout goes: staged on disk when it and the image store's growth fit, each
 * filesystem keeping the reserve and staying inside the kubelet's thresholds; else served from
 * the media when the images alone fit; else refuse (SpaceRefused), naming the numbers and what to free.
 */
export function choosePlan(
  m: BundleManifest,
  config: AgentConfig,
  inputs: SpaceInputs,
  words: SpaceWords = STICK_WORDS,
): SpacePlan {
  const reserve = config.space.reserveBytes;
  const { growth, kubelet } = inputs;
  const reclaimable = Math.max(0, inputs.credit?.reclaimableBytes ?? 0);
  const staged = Math.min(
    Math.max(0, inputs.credit?.alreadyStagedBytes ?? 0),
    m.totals.layoutBytes,
  );
  const fss = afterReclaim(inputs.fs, reclaimable);
  const dirs = { upgrade: config.paths.upgradeDir, store: config.paths.imageStoreDir };
  const failing = (layout: number, on = fss) =>
    demands(on, dirs, layout, growth.bytes, staged)
      .map((d) => ({ d, s: shortfall(d, reserve, kubelet) }))
      .find((x) => x.s);
  const figures: SpaceFigures = {
    layoutBytes: m.totals.layoutBytes,
    alreadyStagedBytes: staged,
    reclaimableBytes: reclaimable,
    growth,
    thresholdsFrom: kubelet.source,
  };
  const refuse = (x: { d: Demand; s?: Shortfall }, delta?: string) =>
    new SpaceRefused(
      {
        dir: x.d.dir,
        needText: needText(x.d, reserve, growth),
        why: x.s!.why,
        freeBytes: x.s!.free,
        figures,
        ...(delta ? { delta } : {}),
      },
      words,
    );
  const plan = (mode: StageMode): SpacePlan => ({
    mode,
    figures,
    message: planText({ mode, figures }, words),
  });
  const staging = failing(m.totals.layoutBytes);
  if (!staging) return plan('staged');
  // a delta's base blobs are on this node, not on the media: it is staged whole, filled bytes too, or not at all
  if (m.base) throw refuse(staging, m.base.version);
  // served from the media, this bundle's own partial staging goes too: its room is free then
  const media = failing(0, afterReclaim(inputs.fs, reclaimable + staged));
  if (!media) return plan('media');
  throw refuse(media);
}

/**
 * The space check of a load: the three filesystems (staging, image store, the kubelet's), the
 * kubelet's thresholds from its config on the node, and the layers the store holds already.
 * `credit`: the agent's own leftovers it will delete or reuse (see SpaceCredit; partialBytes sums them).
 */
export async function planSpace(
  m: BundleManifest,
  config: AgentConfig,
  credit?: SpaceCredit,
  words: SpaceWords = STICK_WORDS,
): Promise<SpacePlan> {
  const [upgrade, store, kubeletFs, kubelet, held] = await Promise.all([
    filesystemFree(config.paths.upgradeDir),
    filesystemFree(config.paths.imageStoreDir),
    filesystemFree(config.space.kubeletRootDir),
    readKubeletThresholds(config.space.kubeletConfig),
    heldLayers(config.runtime, config.paths.imageStoreDir, m.blobs.filter(isLayer)),
  ]);
  const inputs: SpaceInputs = {
    fs: { upgrade, store, kubelet: kubeletFs },
    growth: imageGrowth(m, held, config.runtime),
    kubelet,
    ...(credit ? { credit } : {}),
  };
  return choosePlan(m, config, inputs, words);
}
