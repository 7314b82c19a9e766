// Steps 4 and 5 for a bundle with no file of this load: staged from an origin's entries
// (peers), or a layout staged before the load, put in place and opened.
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { bundleIdentity, finishLayout, type TrustedKey } from '@offline-bundle/format';
import type { PipelineContext } from './pipeline-context.js';
import { stageEntries } from './entry-staging.js';
import { forgetPeerPartial, notePeerPartial } from './peer-partials.js';
import { AgentError, oneLine } from '../errors.js';
import { POLICY_REFUSALS } from './policy.js';
import { planSpace } from './space.js';
import {
  type Admitted,
  type EntryAttempt,
  step,
  type StagedLayout,
  type Staged,
} from './load-attempt.js';
import { rateTracker, showPlan, openStagedStore } from './staging-status.js';
import { admitRelease } from './admit.js';

/** A signed head only vouches for a layout no file of this load backs. */
function needsSigner(
  ctx: PipelineContext,
  a: Admitted,
): asserts a is Admitted & { signer: TrustedKey } {
  const rel = a.head.manifest.release;
  if (!a.signer)
    throw new AgentError(
      'NoTrust',
      `bundle ${rel.version} was staged on this node with no file to check it against (${ctx.media ?? 'a layout'}), which only a signature can vouch for: add the factory's public key to trust.keys`,
    );
}

/**
 * Steps 4 and 5 for an origin with no bundle file (peers): the staging a stick's takes (the
 * space plan, the other partials dropped), its entries filled by the origin through the writer,
 * then the layout put in place and opened as a stick's staged layout is (openStaged).
 */
export async function stageFromEntries(
  ctx: PipelineContext,
  a: Admitted,
  attempt: EntryAttempt,
): Promise<Staged> {
  const { config, log, tracker } = ctx;
  needsSigner(ctx, a);
  const identity = bundleIdentity(a.head.manifestBytes);
  // before any entry is written: its partial goes with its approval (the daemon's look), a stick's stays
  await notePeerPartial(config.paths.stateDir, identity);
  const r = await stageEntries(attempt.source, a.head, {
    upgradeDir: config.paths.upgradeDir,
    signal: ctx.signal ?? attempt.stop,
    log,
    onProgress: rateTracker(tracker),
    onStep: (n) => step(ctx, n),
    plan: (m, credit, words) => planSpace(m, config, credit, words),
    onPlan: (plan) => {
      showPlan(ctx, plan);
      // as a stick's staging shows itself once its plan is made; the origin's first entries follow at once
      tracker.update((s) => {
        s.phase = 'Staging';
        Object.assign(s.progress, { bytesDone: 0, bytesTotal: a.head.manifest.totals.layoutBytes });
      });
    },
  });
  attempt.filled = true;
  const from = attempt.source.senders?.() ?? [];
  if (from.length)
    tracker.update((s) => {
      s.bundle = { ...s.bundle!, fromPeers: from };
    });
  // before it is put in place: a stop here leaves the staging whole under its resume marker; the
  // version policy's refusal (the running version known only now) leaves nothing of it
  await admitRelease(ctx, a).catch(async (err: unknown) => {
    if (!r.already && err instanceof AgentError && POLICY_REFUSALS.has(err.reason)) {
      await rm(`${r.target}.partial`, { recursive: true, force: true });
      await forgetPeerPartial(config.paths.stateDir, identity);
      log.info(
        'staging',
        `bundle ${a.head.manifest.release.version} was fetched whole but refused by the version policy (${err.reason}): its staging ${r.target}.partial is removed`,
        { reason: err.reason },
      );
    }
    throw err;
  });
  const staged = await openStaged(
    ctx,
    a,
    { target: r.target, manifestDigest: identity, ...(r.already ? {} : { head: a.head }) },
    !r.already,
  );
  // in place: no partial of it left for the daemon's look
  await forgetPeerPartial(config.paths.stateDir, identity);
  return staged;
}

/**
 * Step 5 for a layout staged before the load (StagedLayout): a fetch's whole staging renamed into
 * place as a stick's extraction ends, or a kept copy; then what a stick's staged layout goes
 * through. Only a signature vouches for a layout no file of this load backs.
 */
export async function openStaged(
  ctx: PipelineContext,
  a: Admitted,
  s: StagedLayout,
  planned = false,
): Promise<Staged> {
  const rel = a.head.manifest.release;
  const target = join(ctx.config.paths.upgradeDir, `${rel.version}-${rel.arch}`);
  needsSigner(ctx, a);
  if (s.target !== target)
    throw new AgentError(
      'Corrupt',
      `${s.target} holds release ${rel.version} (${rel.arch}), whose place is ${target}: it is not used`,
    );
  if (s.head) {
    await finishLayout(`${target}.partial`, target, s.head).catch((err: unknown) => {
      throw new AgentError(
        'StagingFailed',
        `the staging of ${rel.version} in ${target}.partial cannot be put in place: ${oneLine(err)}`,
        { cause: err },
      );
    });
    step(ctx, 'finish-layout');
  }
  // staged by this load: the plan said it (showPlan)
  if (!planned)
    ctx.tracker.condition(
      'SpaceAvailable',
      'True',
      'FitsOnDisk',
      `staged on this node before the load, in ${target}`,
    );
  ctx.tracker.update((st) => {
    st.bundle = { ...st.bundle!, mode: 'staged' };
  });
  const store = await openStagedStore(ctx, target, a.head.manifest, s.head !== undefined, {
    reason: 'SignatureValid',
    message: `signed by ${a.signer.source}`,
  });
  return { store, mode: 'staged', target, fileDigest: '', whole: true };
}
