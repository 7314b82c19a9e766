// Step 3 of a load: the signed head read from its origin, checked against the trusted keys,
// then against the release the node runs.
import {
  bundleIdentity,
  checkSignature,
  loadTrust,
  readHeader,
  releasePath,
  type BundleSource,
} from '@offline-bundle/format';
import { recordIncoming } from '@offline-bundle/status';
import type { PipelineContext } from './pipeline-context.js';
import { stagingPlace } from './entry-staging.js';
import { AgentError } from '../errors.js';
import { checkPolicy } from './policy.js';
import { readStagedHead } from './kept-layout.js';
import { readReleases } from '../state/release-records.js';
import { assertBundleFile, assertWhole } from './bundle-file.js';
import {
  type Admitted,
  type HeadOrigin,
  type EntryAttempt,
  step,
  type StagedLayout,
} from './load-attempt.js';
import { runningRelease, waitForCluster } from './running-version.js';
import { removeLeftovers } from './leftovers.js';

export const fromFile = (file: string, openSource: () => Promise<BundleSource>): HeadOrigin => ({
  read: async () => {
    await assertBundleFile(file);
    const source = await openSource();
    const head = await readHeader(source);
    await assertWhole(source);
    return { head, source };
  },
});

// Bound to what it was staged under, not to whatever signed bundle.json lies there now; the signature is checked again in admit.
export const fromStaged = (s: StagedLayout): HeadOrigin => ({
  read: async () => {
    const which = `the one it was staged under (${s.manifestDigest})`;
    if (s.head && bundleIdentity(s.head.manifestBytes) !== s.manifestDigest)
      throw new AgentError(
        'Corrupt',
        `the bundle.json staged for ${s.target} is not ${which}: it is not used`,
      );
    return { head: s.head ?? (await readStagedHead(s.target, s.manifestDigest, which)), layout: s };
  },
});

export const fromEntries = (attempt: EntryAttempt): HeadOrigin => ({
  read: async (signal) => ({ head: await attempt.source.head(signal ?? attempt.stop) }),
  attempt,
});

/** Step 3: signature (or digest) of bundle.json, then the arch and version policy. */
export async function admit(
  file: string,
  ctx: PipelineContext,
  origin: HeadOrigin,
): Promise<Admitted> {
  const { config, log, tracker } = ctx;
  const show = (found: string) => {
    tracker.update((s) => {
      s.phase = 'Verifying';
      s.bundle = {
        file: found,
        media: ctx.media ?? 'file',
        ...(ctx.fromPeers?.length ? { fromPeers: ctx.fromPeers } : {}),
      };
      s.conditions = [];
      s.progress = { bytesDone: 0, bytesTotal: 0, imagesDone: 0, imagesTotal: 0 };
    });
    tracker.condition('MediaDetected', 'True', 'BundleFound', `found ${found}`);
    log.info('media', `bundle found: ${found}`, { file: found, media: ctx.media });
  };
  const attempt = origin.attempt;
  if (!attempt) show(file);

  const trust = await loadTrust(config.trust.keys, config.trust.digest);
  const { head, source, layout } = await origin.read(ctx.signal);
  if (attempt) {
    // once there is something to load: a look that finds no peer leaves the node as it was
    await removeLeftovers(config, ctx.runtime, log, tracker.current.history);
    ({ target: attempt.target, identity: attempt.identity } = await stagingPlace(
      config.paths.upgradeDir,
      head,
    ));
    // taken here, not before the lock and the head: what other writers said meanwhile is what the status goes back to
    attempt.before = tracker.current;
    show(attempt.target);
    attempt.shown = true;
  }
  step(ctx, 'admit');
  const signer = checkSignature(
    head.manifestBytes,
    head.signature,
    head.manifest.signer.fingerprint,
    trust,
  );
  const rel = head.manifest.release;
  // an update path (#43) is named in the status, so `bundle cluster` sees both releases come from one bundle
  const path = rel.via?.length ? releasePath(head.manifest).map((h) => h.version) : undefined;
  tracker.update((s) => {
    s.bundle = {
      ...s.bundle!,
      name: rel.name,
      version: rel.version,
      arch: rel.arch,
      ...(signer ? { signer: signer.fingerprint } : {}),
      ...(path ? { path } : {}),
    };
  });
  const a: Admitted = {
    ...(source ? { source } : {}),
    head,
    ...(layout ? { layout } : {}),
    ...(attempt ? { entries: attempt } : {}),
    ...(signer ? { signer } : {}),
    trust,
    releases: [],
  };
  // an origin's bytes are staged first (its own refusals came with its head): a node that waits for the cluster meanwhile fetches, and serves what it fetched
  if (!attempt) await admitRelease(ctx, a);
  return a;
}

/**
 * Step 3, against what the node runs: the running release (waited for when the cluster does not
 * say it), the arch and version policy, the runtime's config; then the attempt in the history.
 */
export async function admitRelease(ctx: PipelineContext, a: Admitted): Promise<void> {
  const { config, log, tracker } = ctx;
  const rel = a.head.manifest.release;
  const path = rel.via?.length ? releasePath(a.head.manifest).map((h) => h.version) : undefined;
  a.releases = await readReleases(config.paths.stateDir);
  let found = await runningRelease(ctx);
  if (!found.release && found.failure && !config.version.allowUnknown)
    found = await waitForCluster(ctx, found);
  const running = found.release;
  const current = running?.version;
  const entry = checkPolicy(a.head.manifest, config, current);
  if (path && current)
    log.info(
      'version',
      `the update path ${path.join(' → ')} is taken from the running ${current}, from ${path[entry]}`,
      { version: rel.version },
    );
  if (!current)
    log.warn(
      'version',
      `running version unknown: ${rel.version} loads without the downgrade and upgrade-source checks (version.allowUnknown)`,
      { version: rel.version },
    );
  await ctx.runtime.checkConfig?.(ctx.signal);
  tracker.update((s) => {
    s.history = recordIncoming(
      s.history,
      { version: rel.version },
      current ? { running: current } : {},
    );
  });
  if (running) a.running = running;
}
