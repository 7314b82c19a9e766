// Steps 4 and 5 for a bundle file: the space plan, then the verified copy to disk (served
// while it is written when signed), or one full pass over the media.
import { rm } from 'node:fs/promises';
import {
  extractBundle,
  verifyBundle,
  type ExtractOptions,
  type VerifiedBundle,
} from '@offline-bundle/format';
import {
  BundleFileStore,
  catalogOf,
  type Catalog,
  type LayoutStore,
} from '@offline-bundle/registry';
import { fromSpool } from '@offline-bundle/status';
import type { PipelineContext } from './pipeline-context.js';
import { planStaging, stagingPlace } from './entry-staging.js';
import { StagingStore } from './staging-store.js';
import { clearPartialsFor, reopenKeptLayout, stagingOptions } from './resume.js';
import { forgetPeerPartial } from './peer-partials.js';
import { AgentError } from '../errors.js';
import { STICK_WORDS, planSpace, type SpacePlan, type SpaceWords } from './space.js';
import { locateBase } from './delta-fill.js';
import { step, type Staged, type FileAdmitted } from './load-attempt.js';
import { rateTracker, showPlan, openStagedStore, showStaged } from './staging-status.js';

/** The space check's words for a file: from the part spool, "the media" is the node's own disk. */
const fileWords = (ctx: PipelineContext): SpaceWords =>
  fromSpool(ctx.media)
    ? {
        ...STICK_WORDS,
        media: "serving from the part spool on this node's disk: no USB stick is needed",
      }
    : STICK_WORDS;

/** How each pass over the file is checked and shown: what Verified says, that it read the head admit checked. */
interface FileCheck {
  onProgress: (done: number, total: number) => void;
  /** The full pass is what counts: its bundle.json must be the one the header check looked at. */
  sameBytes: (manifestBytes: Buffer) => void;
  verifiedBy: { reason: string; message: string };
  /** A delta's base (a bundle that carries only what its base lacks). */
  base: Pick<ExtractOptions, 'base'>;
}

/** Steps 4 and 5: the space check, then the verified copy to disk, or one full pass over the media. */
export async function stageFile(ctx: PipelineContext, a: FileAdmitted): Promise<Staged> {
  const { config, log, tracker, signal } = ctx;
  const m = a.head.manifest;
  const rel = m.release;
  const { place, base, plan } = await planFile(ctx, a);
  const { target, identity, stagedBefore } = place;
  const fileSize = a.source.size;
  const check = fileCheck(ctx, a, base);
  const catalog = catalogOf(m);
  signal?.throwIfAborted();
  let staged: Staged;
  await clearPartialsFor(
    config.paths.upgradeDir,
    plan.mode === 'staged' ? `${target}.partial` : undefined,
    identity,
    log,
  );
  // a fetch's partial of this bundle is the stick's from here: it stays when the approval goes
  await forgetPeerPartial(config.paths.stateDir, identity);
  step(ctx, 'clear-partials');
  if (plan.mode === 'staged') {
    tracker.update((s) => {
      s.phase = 'Staging';
      Object.assign(s.progress, { bytesDone: 0, bytesTotal: fileSize });
    });
    const kept = stagedBefore ? await reopenKeptLayout(target, catalog, log) : undefined;
    // Signed: each blob is good once it hashes to its signed digest, so pulls may start then.
    // Digest-only trust knows nothing good before the whole file is hashed.
    if (!kept && a.signer && config.preload.method !== 'none') {
      await rm(target, { recursive: true, force: true });
      return stageWhilePulling(ctx, a, target, check);
    }
    staged = await copyToDisk(ctx, a, target, kept, check);
  } else {
    tracker.progress({ bytesDone: 0, bytesTotal: fileSize });
    staged = await passOverMedia(ctx, a, catalog, check);
  }
  if (staged.fileDigest)
    tracker.update((s) => {
      s.bundle = { ...s.bundle!, digest: staged.fileDigest };
    });
  log.info('verified', `bundle ${rel.version} ${rel.arch} verified`, {
    digest: staged.fileDigest || undefined,
    signer: a.signer?.fingerprint,
  });
  return staged;
}

/** Where the file is staged, a delta's base, and the space plan (in the status and the log). */
async function planFile(
  ctx: PipelineContext,
  a: FileAdmitted,
): Promise<{
  place: Awaited<ReturnType<typeof stagingPlace>>;
  base: Pick<ExtractOptions, 'base'>;
  plan: SpacePlan;
}> {
  const { config, log } = ctx;
  const m = a.head.manifest;
  const place = await stagingPlace(config.paths.upgradeDir, a.head);
  // a delta's base is found before anything is written: a node without it refuses at once
  const base =
    m.base && !place.stagedBefore
      ? { base: await locateBase(config, m, log, ctx.tracker.current.bundle?.file) }
      : {};
  const plan = await planStaging(
    config.paths.upgradeDir,
    place,
    a.head,
    fileWords(ctx),
    (mm, credit, words) => planSpace(mm, config, credit, words),
  );
  step(ctx, 'plan-space');
  showPlan(ctx, plan);
  return { place, base, plan };
}

/** The checks of this load's passes over the file: the rate shown from here. */
function fileCheck(
  ctx: PipelineContext,
  a: FileAdmitted,
  base: Pick<ExtractOptions, 'base'>,
): FileCheck {
  return {
    onProgress: rateTracker(ctx.tracker),
    sameBytes: (manifestBytes: Buffer) => {
      if (!manifestBytes.equals(a.head.manifestBytes))
        throw new AgentError(
          'Corrupt',
          'bundle.json changed between two reads of the media: the stick is failing; copy the bundle again',
        );
    },
    verifiedBy: a.signer
      ? { reason: 'SignatureValid', message: `signed by ${a.signer.source}` }
      : {
          reason: 'DigestMatches',
          message: `the file matches the expected ${ctx.config.trust.digest}`,
        },
    base,
  };
}

/** The file digest of a full pass whose bundle.json is the one admitted. */
function sameDescription(check: FileCheck, v: VerifiedBundle): string {
  check.sameBytes(v.manifestBytes);
  return v.fileDigest;
}

/** The verified copy to disk in one pass (digest-only trust, or no pulls), or a layout kept from an earlier load. */
async function copyToDisk(
  ctx: PipelineContext,
  a: FileAdmitted,
  target: string,
  kept: LayoutStore | undefined,
  check: FileCheck,
): Promise<Staged> {
  const { signal } = ctx;
  const reuse = !!kept;
  let fileDigest = '';
  if (!reuse) {
    await rm(target, { recursive: true, force: true });
    step(ctx, 'write-entries');
    fileDigest = sameDescription(
      check,
      await extractBundle(a.source, target, {
        trust: a.trust,
        partialDir: `${target}.partial`,
        onProgress: check.onProgress,
        ...check.base,
        ...stagingOptions(ctx, a.signer ? a.head : undefined),
        ...(signal ? { signal } : {}),
      }),
    );
  }
  // extractBundle ends with finishLayout, as a fetch's staging does in openStaged
  if (!reuse) step(ctx, 'finish-layout');
  // A layout found on disk was hashed again (reopenKeptLayout); one just extracted was checked as written.
  if (kept) showStaged(ctx, target, check.verifiedBy);
  const store =
    kept ?? (await openStagedStore(ctx, target, a.head.manifest, true, check.verifiedBy));
  return {
    store,
    mode: 'staged',
    target,
    fileDigest,
    whole: true,
    ...(reuse ? { reused: true } : {}),
  };
}

/** Not enough disk to copy: one full pass verifies the file, and the registry serves from the media. */
async function passOverMedia(
  ctx: PipelineContext,
  a: FileAdmitted,
  catalog: Catalog,
  check: FileCheck,
): Promise<Staged> {
  const { tracker, signal } = ctx;
  const { verifiedBy } = check;
  // each frame's digest from this pass: what the registry serves later is held to it
  const v = await verifyBundle(a.source, {
    trust: a.trust,
    onProgress: check.onProgress,
    frameDigests: true,
    ...(signal ? { signal } : {}),
  });
  const fileDigest = sameDescription(check, v);
  tracker.condition('Verified', 'True', verifiedBy.reason, verifiedBy.message);
  tracker.condition(
    'Staged',
    'False',
    'ServingFromMedia',
    'not enough disk to copy the bundle: the USB stick must stay in until Ready',
  );
  return {
    store: await BundleFileStore.open(a.source, a.head.manifest, catalog, {
      seekIndex: v.seekIndex,
      frameDigests: v.frameDigests!,
    }),
    mode: 'media',
    fileDigest,
  };
}

/**
 * Starts the verified extraction and returns at once with a store that serves each blob as soon
 * as the extraction has written and verified it; `staging.done` settles with the whole pass
 * (conditions Verified and Staged, the file digest). A failure of either side stops the other
 * (`staging.signal`): nothing is pinned, no Ready; what was verified stays for a resume (resume.ts).
 */
function stageWhilePulling(
  ctx: PipelineContext,
  a: FileAdmitted,
  target: string,
  { onProgress, sameBytes, verifiedBy, base }: FileCheck,
): Staged {
  const { log, tracker, signal } = ctx;
  const m = a.head.manifest;
  const partialDir = `${target}.partial`;
  const store = new StagingStore(partialDir, target, catalogOf(m), m);
  const stop = new AbortController();
  const onStop = () => stop.abort(signal!.reason);
  if (signal?.aborted) onStop();
  else signal?.addEventListener('abort', onStop, { once: true });
  const staged: Staged = { store, mode: 'staged', target, fileDigest: '' };
  step(ctx, 'write-entries');
  const extraction = extractBundle(a.source, target, {
    trust: a.trust,
    partialDir,
    onProgress,
    signal: stop.signal,
    ...base,
    ...stagingOptions(ctx, a.signer ? a.head : undefined),
    // what the blobs are held to is the bundle.json the header check admitted, byte for byte
    onManifest: (_m, bytes) => sameBytes(bytes),
    onVerified: (entry) => store.verified(entry.digest),
  });
  const done = extraction
    .then((v) => {
      sameBytes(v.manifestBytes);
      step(ctx, 'finish-layout');
      staged.fileDigest = v.fileDigest;
      store.staged();
      staged.whole = true;
      showStaged(ctx, target, verifiedBy);
      tracker.update((s) => {
        s.phase = 'Preloading';
        s.bundle = { ...s.bundle!, digest: staged.fileDigest };
      });
      // a resumed staging never read the file whole: no file digest to name, each entry was held to the signed bundle.json
      log.info(
        'verified',
        `bundle ${m.release.version} ${m.release.arch} verified${staged.fileDigest ? '' : ' (staging resumed: each entry checked against the signed bundle.json, the file not hashed whole)'}`,
        { digest: staged.fileDigest || undefined, signer: a.signer?.fingerprint },
      );
    })
    .catch((err: unknown) => {
      stop.abort(err);
      store.fail(err);
      throw err;
    });
  done.catch(() => undefined);
  // the stop signal follows ctx.signal (SIGTERM) for the whole load, pulls and pins included, not only the staging
  staged.staging = {
    gate: (ref) => store.image(ref),
    done,
    signal: stop.signal,
    stop: (reason) => stop.abort(reason),
    release: () => signal?.removeEventListener('abort', onStop),
  };
  return staged;
}
