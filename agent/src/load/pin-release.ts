// Step 9 of the data flow: the release's images pinned beside every release still in use, the
// older ones released, the pins read back from the runtime.
import { runningReleases, versionsInUse, type HistoryEntry } from '@offline-bundle/status';
import type { BundleManifest } from '@offline-bundle/format';
import type { PipelineContext } from './pipeline-context.js';
import { checkPinsSettled, publishHoldings } from '../runtime/runtime-checks.js';
import { imageRefs, type ImageInspector } from '../runtime/runtime-target.js';
import { heldForPath, type ReleaseRecord } from '../state/release-records.js';
import { refsToKeepPinned } from '../state/agent-switch-state.js';

/**
 * Pins `m`'s images and those of every release still in use (and the previous agent image while a
 * switch is unconfirmed), releases the rest, says in Pinned what the runtime reports, and
 * publishes what it holds now.
 */
export async function pinRelease(
  ctx: PipelineContext,
  m: BundleManifest,
  releases: readonly ReleaseRecord[],
  inspector: ImageInspector | undefined,
): Promise<void> {
  const { config, log, tracker, runtime, signal } = ctx;
  const rel = m.release;
  const refs = imageRefs(m);
  // Keep every release still in use (the running one, one loaded but not yet complete) pinned next to the new one.
  const inUse = versionsKept(tracker.current.history, releases);
  // another bundle of this same release (its own record) stays pinned too: it is the same release
  const kept = releases.filter(
    (r) => r.arch === rel.arch && (r.version === rel.version || inUse.has(r.version)),
  );
  // and the previous agent image while a switch to a new agent is unconfirmed
  const keptRefs = (await refsToKeepPinned(config.paths.stateDir, kept)).filter(
    (r) => !refs.includes(r),
  );
  const pins = [...new Set([...refs, ...keptRefs])].sort();
  const released = releases
    .filter((r) => r.arch === rel.arch && r.version !== rel.version && !inUse.has(r.version))
    .flatMap((r) => r.refs)
    .filter((r) => !pins.includes(r));
  await runtime.pin(pins, released);
  const still = stillInUse(kept, rel.version);
  const report =
    inspector && config.preload.method !== 'none'
      ? await checkPinsSettled(
          inspector,
          { mustPin: refs, kept: keptRefs, released },
          log,
          runtime.pinSettleMs,
          runtime.noPinsSettleMs,
        )
      : undefined;
  if (config.preload.method === 'none') {
    // the names are written, but the runtime holds none of this release's images to keep
    tracker.condition(
      'Pinned',
      'False',
      'PreloadDisabled',
      `${pins.length} image names written to the pin list${still}, but no image of ${rel.version} was pulled (preload.method is none): the runtime holds none of them to keep`,
    );
  } else if (report?.verifiable) {
    tracker.condition(
      'Pinned',
      'True',
      'Pinned',
      `${pins.length} image names pinned${still}, as the runtime reports`,
    );
  } else {
    tracker.condition(
      'Pinned',
      'Unknown',
      'PinningUnverifiable',
      `${pins.length} image names asked to be pinned${still}, but this runtime does not report pins (CRI-O before 1.28, containerd before 1.6.22): they may be garbage-collected`,
    );
  }
  if (report?.stillPinned.length) {
    tracker.condition(
      'UnpinPending',
      'True',
      'RuntimeKeptPins',
      `the runtime still reports ${report.stillPinned.length} images of older releases pinned (a CRI-O 1.29.4–1.29.6 or 1.30.0–1.30.2 reload keeps removed pins): restart crio to release them`,
    );
    log.warn(
      'pin',
      `the runtime still reports images of older releases pinned: ${report.stillPinned.join(', ')}`,
    );
  }
  // A SIGTERM that came while the pins were applied: stop here, not Ready (the pins stay, as after PinFailed);
  // else publish what the runtime holds now, with the Ready that follows (#38)
  await publishHoldings(inspector, tracker, pins, log, signal);
}

/** Versions still in use by the history, and a path's earlier release (#43) until the node runs the path's final one. */
function versionsKept(
  history: readonly HistoryEntry[],
  releases: readonly ReleaseRecord[],
): Set<string> {
  const runs = runningReleases(history).map((e) => e.version);
  return new Set([
    ...versionsInUse(history),
    ...releases.filter((r) => heldForPath(r, releases, runs)).map((r) => r.version),
  ]);
}

/** " (with 4.14.9 still in use)": the other releases kept pinned beside `version`. */
function stillInUse(kept: readonly ReleaseRecord[], version: string): string {
  const others = [...new Set(kept.filter((r) => r.version !== version).map((r) => r.version))];
  return others.length ? ` (with ${others.join(', ')} still in use)` : '';
}
