// What the runtime reports after the pulls and the pins, checked rather than assumed: a
// runtime that never read the mirror, or never applied the pins, must not yield Ready.
import type { BundleManifest } from '@offline-bundle/format';
import { mirrorPath } from '@offline-bundle/oci';
import type { ServedLog } from '@offline-bundle/registry';
import { runtimeHoldings, type StatusTracker } from '@offline-bundle/status';
import { AgentError, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import type { ImageInspector } from './runtime-target.js';

const byDigest = (img: { repository: string; digest: string }) => `${img.repository}@${img.digest}`;

/** Names a few items of a long list, so a message stays one readable line. */
function some(items: string[], n = 3): string {
  return items.length <= n
    ? items.join(', ')
    : `${items.slice(0, n).join(', ')} and ${items.length - n} more`;
}

/** The refs the runtime no longer holds (ImageStatus finds no image), in order. */
export async function missingImages(
  inspector: ImageInspector,
  refs: readonly string[],
): Promise<string[]> {
  const missing: string[] = [];
  for (const ref of refs) if (!(await inspector.imageStatus(ref))) missing.push(ref);
  return missing;
}

/** The bundle's images (repo@digest) the runtime holds already, before any pull. */
export async function imagesPresent(
  inspector: ImageInspector,
  m: BundleManifest,
): Promise<Set<string>> {
  const present = new Set<string>();
  for (const img of m.images) {
    if (await inspector.imageStatus(byDigest(img))) present.add(byDigest(img));
  }
  return present;
}

/**
 * Every image the runtime did not hold before the pulls must have been asked of our registry:
 * one that is now present without that came from somewhere else (a registry the node can
 * reach after all), and one that is absent was never pulled through us.
 */
export function checkMirrorUsed(m: BundleManifest, present: Set<string>, served: ServedLog): void {
  const missed = m.images
    .filter(
      (img) =>
        !present.has(byDigest(img)) &&
        !served.servedManifest(mirrorPath(img.repository), img.digest),
    )
    .map(byDigest);
  if (missed.length === 0) return;
  throw new AgentError(
    'MirrorNotUsed',
    `the runtime did not fetch ${some(missed)} from the bundle's registry: it is not using the mirror drop-in (was it reloaded? is another registries.conf.d file overriding it?)`,
  );
}

export interface PinReport {
  /** False when the runtime reports no pins at all (CRI-O before 1.28, containerd before 1.6.22). */
  verifiable: boolean;
  /** Released images the runtime still reports pinned. */
  stillPinned: string[];
}

/**
 * Reads `pinned` for every image: ListImages is the source (what `crictl images --pinned`
 * shows); ImageStatus is a cross-check only, as some CRI-O versions leave it false.
 * `mustPin` (this release) must be present and pinned; `kept` (a release still in use) is
 * checked where present; `released` should no longer be pinned.
 */
export async function checkPins(
  inspector: ImageInspector,
  sets: { mustPin: string[]; kept: string[]; released: string[] },
  log?: Logger,
): Promise<PinReport> {
  const listed = await inspector.listImages();
  const pinnedById = new Map(listed.map((i) => [i.id, i.pinned]));
  const verifiable = listed.some((i) => i.pinned);
  const state = async (ref: string): Promise<boolean | undefined> => {
    const st = await inspector.imageStatus(ref);
    if (!st) return undefined;
    const fromList = pinnedById.get(st.id);
    if (fromList !== undefined && st.pinned && !fromList)
      log?.warn(
        'pin-check',
        `ImageStatus and ListImages disagree on whether ${ref} is pinned; ListImages counts`,
        { ref },
      );
    return fromList ?? st.pinned;
  };
  const missing: string[] = [];
  const unpinned: string[] = [];
  for (const ref of sets.mustPin) {
    const s = await state(ref);
    if (s === undefined) missing.push(ref);
    else if (!s) unpinned.push(ref);
  }
  if (missing.length)
    throw new AgentError(
      'PinFailed',
      `${some(missing)} ${missing.length === 1 ? 'is' : 'are'} not in the runtime's store after the pulls: the images were removed meanwhile; plug the stick in again`,
    );
  for (const ref of sets.kept) {
    const s = await state(ref);
    if (s === undefined)
      log?.warn('pin', `${ref} of a release still in use is no longer in the runtime's store`, {
        ref,
      });
    else if (!s) unpinned.push(ref);
  }
  if (!verifiable) return { verifiable, stillPinned: [] };
  if (unpinned.length) {
    throw new AgentError(
      'PinFailed',
      `the runtime does not report ${some(unpinned)} as pinned after the reload: CRI-O 1.28 and 1.29.0–1.29.3 apply pinned_images only when crio starts (restart crio, then plug the stick in again); otherwise a crio.conf.d file sorting after ours replaces our list`,
    );
  }
  const stillPinned: string[] = [];
  for (const ref of sets.released) if ((await state(ref)) === true) stillPinned.push(ref);
  return { verifiable, stillPinned };
}

/**
 * checkPins once the runtime has had time to apply the reload: `systemctl reload crio` (a
 * SIGHUP) returns before CRI-O has re-read its files, so an answer short of "all pinned" is
 * asked again for up to `settleMs` (5 s) before it counts; an answer with no pin at all, for
 * up to `noPinsSettleMs` (a runtime whose version says it never reports pins: 0). A runtime
 * that shows any pin gets the whole `settleMs`, whatever its version said.
 */
export async function checkPinsSettled(
  inspector: ImageInspector,
  sets: { mustPin: string[]; kept: string[]; released: string[] },
  log?: Logger,
  settleMs = 5_000,
  noPinsSettleMs = settleMs,
): Promise<PinReport> {
  const start = Date.now();
  const last = (ms: number) => Date.now() + 250 >= start + ms;
  for (;;) {
    let report: PinReport | undefined;
    let failure: unknown;
    try {
      report = await checkPins(
        inspector,
        sets,
        last(Math.min(settleMs, noPinsSettleMs)) ? log : undefined,
      );
    } catch (err) {
      failure = err;
    }
    if (report?.verifiable && report.stillPinned.length === 0) return report;
    if (last(report && !report.verifiable ? noPinsSettleMs : settleMs)) {
      if (failure) throw failure;
      return report!;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Reads what the runtime holds (ListImages) and publishes it, bounded, as status.runtime: what
 * `bundle cluster check` reads to tell, per node, which images are present and pinned there.
 * `refs` are the names this node loaded and pins. A runtime that does not answer leaves the
 * last reading in place (said in the journal): it never fails a load. An aborted `signal` throws
 * first (a SIGTERM during the pins: not Ready, nothing published).
 */
export async function publishHoldings(
  inspector: ImageInspector | undefined,
  tracker: Pick<StatusTracker, 'runtime'>,
  refs: readonly string[],
  log?: Logger,
  signal?: AbortSignal,
): Promise<void> {
  signal?.throwIfAborted();
  if (!inspector) return;
  try {
    const h = runtimeHoldings(await inspector.listImages(), refs);
    tracker.runtime(h);
    if (h.bundle.missing.length || h.bundle.unpinned.length)
      log?.warn(
        'holdings',
        `the runtime lacks ${h.bundle.missing.length} and does not pin ${h.bundle.unpinned.length} of the ${h.bundle.refs} names this node loaded`,
        { missing: h.bundle.missing.length, unpinned: h.bundle.unpinned.length },
      );
  } catch (err) {
    log?.warn(
      'holdings',
      `cannot read the runtime's image list to publish what it holds: ${oneLine(err)}`,
    );
  }
}
