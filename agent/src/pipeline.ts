import { readFile, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import {
  checkSignature, extractBundle, loadTrust, readHeader, verifyBundle, type BundleManifest, type VerifiedBundle,
} from '@offline-bundle/format';
import { BundleFileStore, LayoutStore, catalogOf, startRegistry, type BlobStore, type RunningRegistry } from '@offline-bundle/registry';
import { markFailed, markLoaded, observeRunning, readClusterVersion, recordIncoming, runningReleases, versionsInUse, type StatusTracker } from '@offline-bundle/status';
import type { AgentConfig } from './config.js';
import { AgentError, oneLine, reasonOf } from './errors.js';
import type { Logger } from './log.js';
import { checkPolicy } from './policy.js';
import { imageRefs, type RuntimeTarget } from './runtime-target.js';
import { planSpace, type StageMode } from './space.js';
import { readReleases, recordRelease } from './state.js';
import { withLoadLock } from './lock.js';
import { assertBundleFile, mediaGone } from './bundle-file.js';

export interface PipelineContext {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  runtime: RuntimeTarget;
  /** Where the file came from, for status ("USB stick LABEL", a mount point, "file"). */
  media?: string;
  /** Aborts the load (SIGTERM): the cleanup of every step still runs. */
  signal?: AbortSignal;
}

export interface LoadResult {
  version: string;
  arch: string;
  mode: StageMode;
  images: number;
  refs: string[];
  fileDigest: string;
}

/**
 * The release the node runs, for the version policy and the pins: from the config, else from
 * OpenShift's ClusterVersion (recorded in the history, so a completed upgrade releases older
 * pins), else, when the API server cannot be reached, the last one seen there.
 */
export async function runningVersion(ctx: PipelineContext): Promise<string | undefined> {
  const { config, tracker, log } = ctx;
  if (config.version.current) return config.version.current;
  if (!config.version.fromCluster || !config.status.kubeconfig) return undefined;
  try {
    const v = await readClusterVersion(config.status.kubeconfig, { timeoutMs: 10_000 });
    if (v) {
      tracker.update((s) => { s.history = observeRunning(s.history, v); });
      return v;
    }
  } catch (err) {
    log.warn('version', `cannot read the running version from the cluster (${oneLine(err)}); using the last one seen`);
  }
  return runningReleases(tracker.current.history).at(-1)?.version;
}

/** Partial staging directories are never trusted: a crash or a pulled stick leaves one, the next run drops it. */
export async function removeStalePartials(upgradeDir: string): Promise<string[]> {
  let names: string[] = [];
  try {
    names = (await readdir(upgradeDir)).filter((n) => n.endsWith('.partial'));
  } catch {
    return [];
  }
  for (const n of names) await rm(join(upgradeDir, n), { recursive: true, force: true });
  return names;
}

function rateTracker(tracker: StatusTracker) {
  const started = Date.now();
  let last = 0;
  return (done: number, total: number) => {
    const now = Date.now();
    if (now - last < 1000 && done < total) return;
    last = now;
    const secs = (now - started) / 1000;
    const rate = secs > 0 ? done / secs : 0;
    tracker.progress({ bytesDone: done, bytesTotal: total, rate: Math.round(rate), ...(rate > 0 ? { etaSeconds: Math.round((total - done) / rate) } : {}) });
  };
}

/** A staged layout is reused after a restart only if it holds exactly this bundle's signed description. */
async function alreadyStaged(dir: string, manifestBytes: Buffer): Promise<boolean> {
  try {
    return (await readFile(join(dir, 'bundle.json'))).equals(manifestBytes);
  } catch {
    return false;
  }
}

/**
 * Steps 3 to 10 of the data flow for one bundle file. Throws AgentError (or a library error)
 * on refusal; the caller records the failure. Whatever fails, the registry is stopped, the
 * mirror drop-ins are removed and no partial layout stays behind.
 */
export async function loadBundle(file: string, ctx: PipelineContext): Promise<LoadResult> {
  const { config, log, tracker, runtime, signal } = ctx;
  tracker.update((s) => {
    s.phase = 'Verifying';
    s.bundle = { file, media: ctx.media ?? 'file' };
    s.conditions = [];
    s.progress = { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 };
  });
  tracker.condition('MediaDetected', 'True', 'BundleFound', `found ${file}`);
  log.info('media', `bundle found: ${file}`, { file, media: ctx.media });

  const trust = await loadTrust(config.trust.keys, config.trust.digest);
  await assertBundleFile(file);
  const head = await readHeader(file);
  const signer = checkSignature(head.manifestBytes, head.signature, head.manifest.signer.fingerprint, trust);
  const m: BundleManifest = head.manifest;
  const rel = m.release;
  tracker.update((s) => {
    s.bundle = { ...s.bundle!, name: rel.name, version: rel.version, arch: rel.arch, ...(signer ? { signer: signer.fingerprint } : {}) };
  });
  const releases = await readReleases(config.paths.stateDir);
  const current = await runningVersion(ctx);
  checkPolicy(m, config, current);
  tracker.update((s) => {
    s.history = recordIncoming(s.history, { version: rel.version }, current ? { running: current } : {});
  });

  const plan = await planSpace(m, config);
  tracker.condition('SpaceAvailable', 'True', plan.mode === 'staged' ? 'FitsOnDisk' : 'ServeFromMedia', plan.message);
  tracker.update((s) => {
    s.bundle = { ...s.bundle!, mode: plan.mode };
  });
  log.info('space', plan.message, { mode: plan.mode });

  const stale = await removeStalePartials(config.paths.upgradeDir);
  if (stale.length) log.warn('staging', `removed unfinished staging from an earlier run: ${stale.join(', ')}`);
  const fileSize = (await stat(file)).size;
  const target = join(config.paths.upgradeDir, `${rel.version}-${rel.arch}`);
  const onProgress = rateTracker(tracker);
  const verifiedBy = signer ? { reason: 'SignatureValid', message: `signed by ${signer.source}` } : { reason: 'DigestMatches', message: `the file matches the expected ${config.trust.digest}` };
  // The full pass is what counts: its bundle.json must be the one the header check looked at.
  const sameDescription = (v: VerifiedBundle) => {
    if (!v.manifestBytes.equals(head.manifestBytes)) throw new AgentError('Corrupt', 'bundle.json changed between two reads of the media: the stick is failing; copy the bundle again');
  };
  let store: BlobStore | undefined;
  let fileDigest = '';
  let registry: RunningRegistry | undefined;
  let unmirror: (() => Promise<void>) | undefined;
  const catalog = catalogOf(m);
  const refs = imageRefs(m);
  try {
    signal?.throwIfAborted();
    if (plan.mode === 'staged') {
      tracker.update((s) => {
        s.phase = 'Staging';
        Object.assign(s.progress, { bytesDone: 0, bytesTotal: fileSize });
      });
      const reuse = await alreadyStaged(target, head.manifestBytes);
      if (!reuse) {
        await rm(target, { recursive: true, force: true });
        const v = await extractBundle(file, target, { trust, partialDir: `${target}.partial`, onProgress, ...(signal ? { signal } : {}) });
        sameDescription(v);
        fileDigest = v.fileDigest;
      } else {
        log.info('staging', `reusing the layout staged earlier in ${target}; checking it`);
      }
      tracker.condition('Verified', 'True', verifiedBy.reason, verifiedBy.message);
      // A layout found on disk is hashed again before use; one just extracted was checked as written.
      store = await LayoutStore.open(target, catalog, { verified: !reuse }).catch((err: unknown) => {
        throw new AgentError('StagingFailed', `${oneLine(err)}`, { cause: err });
      });
      tracker.condition('Staged', 'True', 'Staged', `layout in ${target}`);
    } else {
      tracker.progress({ bytesDone: 0, bytesTotal: fileSize });
      const v = await verifyBundle(file, { trust, onProgress, ...(signal ? { signal } : {}) });
      sameDescription(v);
      fileDigest = v.fileDigest;
      tracker.condition('Verified', 'True', verifiedBy.reason, verifiedBy.message);
      tracker.condition('Staged', 'False', 'ServingFromMedia', 'not enough disk to copy the bundle: the USB stick must stay in until Ready');
      store = await BundleFileStore.open(file, m, catalog);
    }
    if (fileDigest) tracker.update((s) => { s.bundle = { ...s.bundle!, digest: fileDigest }; });
    log.info('verified', `bundle ${rel.version} ${rel.arch} verified`, { digest: fileDigest || undefined, signer: signer?.fingerprint });

    signal?.throwIfAborted();
    registry = await startRegistry({ store, catalog });
    tracker.update((s) => {
      s.phase = 'Serving';
      Object.assign(s.progress, { imagesDone: 0, imagesTotal: refs.length });
    });
    tracker.condition('Serving', 'True', 'RegistryUp', `temporary registry on ${registry.address}`);
    log.info('serving', `temporary registry on ${registry.address}`, { address: registry.address });
    unmirror = await runtime.mirror(registry.address, m);

    tracker.update((s) => {
      s.phase = 'Preloading';
      Object.assign(s.progress, { imagesDone: 0, imagesTotal: refs.length });
    });
    await runtime.preload(refs, (done, total, ref) => {
      tracker.progress({ imagesDone: done, imagesTotal: total });
      log.info('preload', `pulled ${ref} (${done}/${total})`, { ref });
    }, signal);
    tracker.condition('Preloaded', 'True', 'AllImagesPulled', `${refs.length} images in the runtime's store`);

    signal?.throwIfAborted();
    tracker.phase('Pinning');
    // Keep every release still in use (the running one, one loaded but not yet complete) pinned next to the new one.
    const inUse = new Set(versionsInUse(tracker.current.history));
    const kept = releases.filter((r) => r.arch === rel.arch && r.version !== rel.version && inUse.has(r.version));
    const pins = [...new Set([...refs, ...kept.flatMap((r) => r.refs)])].sort();
    const released = releases.filter((r) => r.arch === rel.arch && r.version !== rel.version && !inUse.has(r.version)).flatMap((r) => r.refs).filter((r) => !pins.includes(r));
    await runtime.pin(pins, released);
    tracker.condition('Pinned', 'True', 'Pinned', `${pins.length} images pinned${kept.length ? ` (with ${kept.map((r) => r.version).join(', ')} still in use)` : ''}`);
  } finally {
    await unmirror?.().catch((err) => log.error('mirror', `could not remove the mirror drop-in: ${oneLine(err)}`));
    await registry?.close().catch(() => undefined);
    await store?.close().catch(() => undefined);
    if (registry) tracker.condition('Serving', 'False', 'RegistryStopped', 'temporary registry stopped');
    // Ready or not, a layout the config does not keep goes: a failed one is never trusted later.
    if (plan.mode === 'staged' && !config.staging.keep) await rm(target, { recursive: true, force: true });
  }
  await recordRelease(config.paths.stateDir, { version: rel.version, arch: rel.arch, ...(fileDigest ? { digest: fileDigest } : {}), refs, loadedAt: new Date().toISOString() });
  tracker.update((s) => {
    s.phase = 'Ready';
    s.history = markLoaded(s.history, rel.version, fileDigest ? { digest: fileDigest } : {});
  });
  tracker.condition('Ready', 'True', 'Loaded', `update ${rel.version} loaded: you may remove the USB stick`);
  log.info('ready', `update ${rel.version} is loaded on this node; the USB stick may be removed`, { version: rel.version });
  return { version: rel.version, arch: rel.arch, mode: plan.mode, images: m.images.length, refs, fileDigest };
}

/** Runs loadBundle and turns any failure into the Failed condition, leaving nothing half-done. */
export async function runLoad(file: string, ctx: PipelineContext): Promise<LoadResult> {
  try {
    return await withLoadLock(ctx.config.paths.stateDir, () => loadBundle(file, ctx));
  } catch (caught) {
    const err = mediaGone(caught, file);
    const reason = reasonOf(err);
    const message = oneLine(err);
    const version = ctx.tracker.current.bundle?.version;
    if (version) ctx.tracker.update((s) => { s.history = markFailed(s.history, version); });
    ctx.tracker.condition('Failed', 'True', reason, message);
    ctx.tracker.condition('Ready', 'False', reason, message);
    ctx.tracker.phase('Failed');
    ctx.log.error('failed', message, { reason, file });
    throw err instanceof AgentError ? err : new AgentError(reason, message, { cause: err });
  }
}
