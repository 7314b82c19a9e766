import { readFile, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import {
  checkSignature, extractBundle, loadTrust, readHeader, verifyBundle, type BundleManifest, type VerifiedBundle,
} from '@offline-bundle/format';
import { BundleFileStore, LayoutStore, catalogOf, startRegistry, type BlobStore, type RunningRegistry } from '@offline-bundle/registry';
import { markFailed, markLoaded, observeRunning, readClusterRelease, recordIncoming, runningReleases, versionsInUse, type ClusterRelease, type StatusTracker } from '@offline-bundle/status';
import { adoptRunningRelease } from './running-release.js';
import type { AgentConfig } from './config.js';
import { AgentError, failureOf, oneLine } from './errors.js';
import type { Logger } from './log.js';
import { checkPolicy } from './policy.js';
import { imageRefs, type RuntimeTarget } from './runtime-target.js';
import { checkMirrorUsed, checkPins, imagesPresent } from './runtime-checks.js';
import { planSpace, type StageMode } from './space.js';
import { readReleases, recordRelease } from './state.js';
import { withLoadLock } from './lock.js';

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
  return (await runningRelease(ctx))?.version;
}

/** As runningVersion, with the release image when ClusterVersion names it. */
async function runningRelease(ctx: PipelineContext): Promise<ClusterRelease | undefined> {
  const { config, tracker, log } = ctx;
  if (config.version.current) return { version: config.version.current };
  if (!config.version.fromCluster || !config.status.kubeconfig) return undefined;
  try {
    const r = await readClusterRelease(config.status.kubeconfig, { timeoutMs: 10_000 });
    if (r) {
      tracker.update((s) => { s.history = observeRunning(s.history, r.version); });
      return r;
    }
  } catch (err) {
    log.warn('version', `cannot read the running version from the cluster (${oneLine(err)}); using the last one seen`);
  }
  const last = runningReleases(tracker.current.history).at(-1)?.version;
  return last ? { version: last } : undefined;
}

/**
 * What a killed load (SIGKILL, power cut) leaves: partial staging, a staged layout the config
 * does not keep, mirror drop-ins pointing at a registry that is gone. Run under the load lock
 * before every load and at daemon start, so neither waits for the other to clean up.
 */
export async function removeLeftovers(config: AgentConfig, runtime: RuntimeTarget, log: Logger): Promise<void> {
  const stale = await removeStalePartials(config.paths.upgradeDir);
  if (stale.length) log.warn('staging', `removed unfinished staging left by a crash or reboot: ${stale.join(', ')}`);
  if (!config.staging.keep) {
    const names = await readdir(config.paths.upgradeDir).catch(() => [] as string[]);
    // staged layouts are "<version>-<arch>" directories holding a bundle.json
    const layouts = [];
    for (const n of names) if (await stat(join(config.paths.upgradeDir, n, 'bundle.json')).then(() => true, () => false)) layouts.push(n);
    for (const n of layouts) await rm(join(config.paths.upgradeDir, n), { recursive: true, force: true });
    if (layouts.length) log.warn('staging', `removed staged layouts a stopped load left behind (staging.keep is false): ${layouts.join(', ')}`);
  }
  await runtime.cleanup().catch((err) => log.warn('mirror', `could not remove a stale mirror drop-in: ${oneLine(err)}`));
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
  const head = await readHeader(file);
  const signer = checkSignature(head.manifestBytes, head.signature, head.manifest.signer.fingerprint, trust);
  const m: BundleManifest = head.manifest;
  const rel = m.release;
  tracker.update((s) => {
    s.bundle = { ...s.bundle!, name: rel.name, version: rel.version, arch: rel.arch, ...(signer ? { signer: signer.fingerprint } : {}) };
  });
  const releases = await readReleases(config.paths.stateDir);
  const running = await runningRelease(ctx);
  const current = running?.version;
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
    // Asked before the mirror exists: an image the runtime holds already is not pulled through us.
    const inspector = await runtime.inspector();
    const present = inspector ? await imagesPresent(inspector, m) : undefined;
    if (running) {
      const adopted = await adoptRunningRelease({ stateDir: config.paths.stateDir, arch: rel.arch, running, incoming: m, releases, ...(inspector ? { inspector } : {}) });
      if (adopted) {
        releases.push(adopted);
        log.info('pin', `the running release ${adopted.version} was not loaded by this agent: its ${adopted.refs.length} images on this node stay pinned until ${rel.version} is complete`, { version: adopted.version });
      }
    }
    unmirror = await runtime.mirror(registry.address, m);

    tracker.update((s) => {
      s.phase = 'Preloading';
      Object.assign(s.progress, { imagesDone: 0, imagesTotal: refs.length });
    });
    await runtime.preload(refs, (done, total, ref) => {
      tracker.progress({ imagesDone: done, imagesTotal: total });
      log.info('preload', `pulled ${ref} (${done}/${total})`, { ref });
    }, signal);
    if (present && config.preload.method !== 'none') checkMirrorUsed(m, present, registry.served);
    else if (!present) log.warn('preload', 'the runtime does not answer on its CRI socket: cannot prove the pulls went through the bundle\'s registry');
    tracker.condition('Preloaded', 'True', 'AllImagesPulled', `${refs.length} images in the runtime's store (${registry.served.blobs} blobs served)`);

    signal?.throwIfAborted();
    tracker.phase('Pinning');
    // The mirror goes before the pins are applied: one reload (CRI-O) covers both.
    await unmirror();
    unmirror = undefined;
    // Keep every release still in use (the running one, one loaded but not yet complete) pinned next to the new one.
    const inUse = new Set(versionsInUse(tracker.current.history));
    const kept = releases.filter((r) => r.arch === rel.arch && r.version !== rel.version && inUse.has(r.version));
    const keptRefs = [...new Set(kept.flatMap((r) => r.refs))].filter((r) => !refs.includes(r));
    const pins = [...new Set([...refs, ...keptRefs])].sort();
    const released = releases.filter((r) => r.arch === rel.arch && r.version !== rel.version && !inUse.has(r.version)).flatMap((r) => r.refs).filter((r) => !pins.includes(r));
    await runtime.pin(pins, released);
    const still = kept.length ? ` (with ${kept.map((r) => r.version).join(', ')} still in use)` : '';
    const report = inspector ? await checkPins(inspector, { mustPin: refs, kept: keptRefs, released }, log) : undefined;
    if (report?.verifiable) {
      tracker.condition('Pinned', 'True', 'Pinned', `${pins.length} images pinned${still}, as the runtime reports`);
    } else {
      tracker.condition('Pinned', 'Unknown', 'PinningUnverifiable', `${pins.length} images asked to be pinned${still}, but this runtime does not report pins (CRI-O before 1.28, containerd before 1.7): they may be garbage-collected`);
    }
    if (report?.stillPinned.length) {
      tracker.condition('UnpinPending', 'True', 'RuntimeKeptPins', `the runtime still reports ${report.stillPinned.length} images of older releases pinned (a CRI-O 1.29.4–1.29.6 or 1.30.0–1.30.2 reload keeps removed pins): restart crio to release them`);
      log.warn('pin', `the runtime still reports images of older releases pinned: ${report.stillPinned.join(', ')}`);
    }
    // A SIGTERM that came while the pins were applied: stop here, not Ready (the pins stay, as after PinFailed).
    signal?.throwIfAborted();
  } finally {
    await unmirror?.().catch((err) => log.error('mirror', `could not remove the mirror drop-in: ${oneLine(err)}`));
    await runtime.apply().catch((err) => log.error('reload', `the runtime did not take the removal of the mirror: ${oneLine(err)}`));
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
    return await withLoadLock(ctx.config.paths.stateDir, async () => {
      await removeLeftovers(ctx.config, ctx.runtime, ctx.log);
      return loadBundle(file, ctx);
    });
  } catch (err) {
    const { reason, message } = failureOf(err, file, ctx.config.paths.upgradeDir);
    const version = ctx.tracker.current.bundle?.version;
    if (version) ctx.tracker.update((s) => { s.history = markFailed(s.history, version); });
    ctx.tracker.condition('Failed', 'True', reason, message);
    ctx.tracker.condition('Ready', 'False', reason, message);
    ctx.tracker.phase('Failed');
    ctx.log.error('failed', message, { reason, file });
    throw err instanceof AgentError ? err : new AgentError(reason, message, { cause: err });
  }
}
