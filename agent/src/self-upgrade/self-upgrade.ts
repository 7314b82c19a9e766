// The agent's switch to a newer agent that a Ready bundle carries (selfUpgrade.mode quadlet):
// a Quadlet drop-in naming the new image by digest, then daemon-reload and a restart. The new
// agent confirms at its start; if it never does, a host-side timer (or the old agent, when it
// runs again) removes the drop-in, and the old image, still pinned, runs again.
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { eq as semverEq, gt as semverGt, valid as semverValid } from 'semver';
import {
  AGENT_REPOSITORY,
  AGENT_VERSION_RULE,
  isAgentVersion,
  type BundleAgent,
} from '@offline-bundle/format';
import { formatReference, parseReference } from '@offline-bundle/oci';
import { makeDirs, readSmallFile, writeFileAtomic } from '@offline-bundle/host';
import { reloadRuntime } from '@offline-bundle/runtime';
import type { StatusTracker } from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import type { RuntimeTarget } from '../runtime/runtime-target.js';
import { readReleases } from '../state/release-records.js';
import {
  clearAgentSwitch,
  isAgentImageByDigest,
  isCanonicalReference,
  pendingMarker,
  readAgentSwitch,
  refsToKeepPinned,
  writeAgentSwitch,
  type AgentSwitchRecord,
} from '../state/agent-switch-state.js';

export const DROP_IN_NAME = 'image.conf';

interface SwitchContext {
  config: AgentConfig;
  log: Logger;
  tracker: StatusTracker;
  runtime: RuntimeTarget;
  /** The running agent's version (TOOL_VERSION). */
  agentVersion: string;
}

const dropInFile = (config: AgentConfig) => join(config.selfUpgrade.dropInDir, DROP_IN_NAME);
const imageOf = (agent: BundleAgent) => `${agent.repository}@${agent.digest}`;

/** The drop-in's text: only Image= changes; everything else stays the unit's. */
export function renderImageDropIn(image: string): string {
  // the one value a drop-in holds: our repository by digest, never a line of anything else
  if (!isAgentImageByDigest(image))
    throw new Error(
      `refusing to write ${JSON.stringify(image).slice(0, 200)} into ${DROP_IN_NAME}: not ${AGENT_REPOSITORY}@sha256:<64 hex>`,
    );
  return `# Written by bundle-agent: the agent image a bundle brought. Remove this file and run\n# systemctl daemon-reload && systemctl restart bundle-agent to go back to the unit's image.\n[Container]\nImage=${image}\n`;
}

/** A reference as the runtime names it, or undefined for anything else (it goes into the pins). */
function asReference(value: string | undefined): string | undefined {
  if (!value || !/^[\x21-\x7e]+$/.test(value)) return undefined;
  try {
    const ref = formatReference(parseReference(value));
    return isCanonicalReference(ref) ? ref : undefined;
  } catch {
    return undefined;
  }
}

/** Unit files and podman's .containerenv are a few hundred bytes. */
const MAX_UNIT_FILE_BYTES = 64 * 1024;
const readSmallText = (path: string) =>
  readSmallFile(path, MAX_UNIT_FILE_BYTES).then(
    (r) => r.bytes.toString('utf8'),
    () => undefined,
  );

/** The Image= of our drop-in, when there is one and it names our repository by digest (as we write it). */
async function currentDropInImage(config: AgentConfig): Promise<string | undefined> {
  const text = await readSmallText(dropInFile(config));
  const image = text ? /^Image=(\S+)$/m.exec(text)?.[1] : undefined;
  return isAgentImageByDigest(image) ? image : undefined;
}

/** podman writes image="…" into a privileged container's /run/.containerenv: the unit's own image. */
async function containerEnvImage(config: AgentConfig): Promise<string | undefined> {
  const env = (await readSmallText(join(config.root, 'run/.containerenv'))) ?? '';
  return asReference(/^image="([^"\n]{1,1024})"$/m.exec(env)?.[1]);
}

/** Puts back what ran before: the previous drop-in, or none (the unit's own image). */
async function restorePrevious(config: AgentConfig, rec: AgentSwitchRecord): Promise<void> {
  if (rec.from.dropIn && rec.from.image)
    await writeFileAtomic(dropInFile(config), renderImageDropIn(rec.from.image));
  else await rm(dropInFile(config), { force: true });
}

const sq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Host-side rollback: undoes this switch unless the new agent removed the marker by confirming.
 * The marker holds the target digest, so a timer left from an earlier, confirmed switch never
 * undoes a later one.
 */
export function rollbackScript(config: AgentConfig, rec: AgentSwitchRecord): string {
  const marker = sq(pendingMarker(config.paths.stateDir));
  const file = dropInFile(config);
  // a new temporary file of a unique name (mktemp), never a fixed one a symlink may stand at
  const restore =
    rec.from.dropIn && rec.from.image
      ? `tmp=$(mktemp ${sq(join(config.selfUpgrade.dropInDir, `.${DROP_IN_NAME}.XXXXXX`))}) && printf '%s' ${sq(renderImageDropIn(rec.from.image))} > "$tmp" && sync "$tmp" && mv -f "$tmp" ${sq(file)}`
      : `rm -f ${sq(file)}`;
  // the journal's one line on why the agent went back (versions and images are validated records)
  const why = `bundle-agent ${rec.to.version} did not report within ${config.selfUpgrade.confirmMinutes} min: back to ${rec.from.dropIn && rec.from.image ? rec.from.image : "the unit's own image"} (bundle-agent ${rec.from.version})`;
  return `if [ "$(head -n 1 ${marker} 2>/dev/null)" = ${sq(rec.to.digest)} ]; then echo ${sq(why)} && ${restore} && rm -f ${marker} && systemctl daemon-reload && systemctl restart ${sq(config.selfUpgrade.unit)}; fi`;
}

async function run(command: string[], what: string): Promise<void> {
  if (command.length === 0) return;
  await reloadRuntime(command, { timeoutMs: 120_000 }).catch((err) => {
    throw new Error(`${what} failed: ${oneLine(err)}`);
  });
}

/**
 * After a bundle is Ready: when it carries an agent newer than this one (semver), switch to it.
 * Never throws: the bundle is loaded whatever happens here; the AgentUpgraded condition says.
 */
export async function switchAgentIfNewer(
  ctx: SwitchContext,
  agent: BundleAgent | undefined,
): Promise<'switching' | 'none'> {
  if (!agent) return 'none';
  try {
    return await decideAndSwitch(ctx, agent);
  } catch (err) {
    // a Ready bundle stays Ready: whatever went wrong here is the switch's, not the load's
    const message = `not switching to bundle-agent ${agent.version}: ${oneLine(err)}`;
    try {
      ctx.tracker.condition('AgentUpgraded', 'False', 'AgentUpgradeFailed', message);
      ctx.log.error('agent', message);
    } catch {
      // nothing left to report with
    }
    return 'none';
  }
}

async function decideAndSwitch(
  ctx: SwitchContext,
  agent: BundleAgent,
): Promise<'switching' | 'none'> {
  if (await declinesSwitch(ctx, agent)) return 'none';
  const rec = await switchRecord(ctx, agent);
  if (!rec) return 'none';
  try {
    await startSwitch(ctx, agent, rec);
    return 'switching';
  } catch (err) {
    await undoSwitch(ctx, agent, rec, err);
    return 'none';
  }
}

/** Whether the bundle's agent is not switched to (off, not newer, a switch unsettled or undone before, an image not held): said why. */
async function declinesSwitch(ctx: SwitchContext, agent: BundleAgent): Promise<boolean> {
  const { config, log, tracker } = ctx;
  const running = ctx.agentVersion;
  if (config.selfUpgrade.mode === 'off') {
    log.info(
      'agent',
      `the bundle carries bundle-agent ${agent.version}; selfUpgrade.mode is off: not switching (this agent is ${running})`,
    );
    return true;
  }
  if (!isAgentVersion(agent.version)) {
    const why = `the bundle's agent version ${JSON.stringify(agent.version)} is not ${AGENT_VERSION_RULE}: not switching`;
    tracker.condition('AgentUpgraded', 'False', 'BadAgentVersion', why);
    log.warn('agent', why);
    return true;
  }
  if (!semverGt(agent.version, running)) {
    log.info(
      'agent',
      `the bundle carries bundle-agent ${agent.version}, not newer than this agent (${running}): nothing to switch`,
    );
    return true;
  }
  let before = await readAgentSwitch(config.paths.stateDir, (why) => log.warn('agent', why));
  // one switch at a time: a pending one is settled first (overdue: undone), else this waits
  if (before?.state === 'pending') before = await settleAgentSwitch(ctx);
  if (before?.state === 'pending') {
    const why = `a switch to bundle-agent ${before.to.version} (${before.to.image}) is under way, unconfirmed: not starting another to ${agent.version}; the bundle's agent is switched to when it is loaded again after that one settles`;
    tracker.condition('AgentUpgraded', 'Unknown', 'SwitchPending', why);
    log.warn('agent', why);
    return true;
  }
  if (before && before.to.digest === agent.digest && before.state !== 'done') {
    log.warn(
      'agent',
      `the switch to bundle-agent ${agent.version} was undone before (${before.message ?? before.state}): not trying it again; a bundle with another agent image will`,
    );
    return true;
  }
  // podman runs the unit with Pull=never: an image the runtime does not hold would not start
  const missing = await imageNotInRuntime(ctx, imageOf(agent));
  if (missing) {
    const why = `not switching to bundle-agent ${agent.version}: ${missing}`;
    tracker.condition('AgentUpgraded', 'False', 'AgentImageNotInRuntime', why);
    log.warn('agent', why);
    return true;
  }
  return false;
}

/** The pending switch from the image this agent runs, or undefined (said why) when that image cannot be told. */
async function switchRecord(
  ctx: SwitchContext,
  agent: BundleAgent,
): Promise<AgentSwitchRecord | undefined> {
  const { config, log, tracker } = ctx;
  const running = ctx.agentVersion;
  // what runs now: our drop-in's image, else the unit's own
  const fromDropIn = await currentDropInImage(config);
  const previous = fromDropIn ?? (await containerEnvImage(config));
  if (!previous) {
    const why = `not switching to bundle-agent ${agent.version}: cannot tell which image this agent runs (no drop-in of ours, no image= in /run/.containerenv), so a rollback would have nothing to go back to`;
    tracker.condition('AgentUpgraded', 'False', 'RunningImageUnknown', why);
    log.warn('agent', why);
    return undefined;
  }
  const rec: AgentSwitchRecord = {
    state: 'pending',
    from: {
      version: running,
      ...(previous ? { image: previous } : {}),
      ...(fromDropIn ? { dropIn: true } : {}),
    },
    to: { version: agent.version, image: imageOf(agent), digest: agent.digest },
    at: new Date().toISOString(),
    confirmSeconds: config.selfUpgrade.confirmMinutes * 60,
  };
  return rec;
}

/** Recorded, the previous image pinned, the rollback scheduled, then the drop-in written and the restart asked for. */
async function startSwitch(
  ctx: SwitchContext,
  agent: BundleAgent,
  rec: AgentSwitchRecord,
): Promise<void> {
  const { config, log, tracker } = ctx;
  const running = ctx.agentVersion;
  const previous = rec.from.image;
  // recorded first: a crash from here on leaves a pending switch the rollback settles
  await writeAgentSwitch(config.paths.stateDir, rec);
  if (previous) await keepPinned(ctx.runtime, [previous]);
  // the rollback is scheduled before the drop-in exists: no moment where the new image is
  // named and nothing would undo it (a reboot loses the timer: the boot guard takes over)
  const { scheduleRollback, confirmMinutes } = config.selfUpgrade;
  // one timer per switch, named after its target
  const timer = `--unit=${config.selfUpgrade.unit}-rollback-${agent.digest.slice('sha256:'.length, 'sha256:'.length + 12)}`;
  if (scheduleRollback.length)
    await run(
      [
        ...scheduleRollback,
        timer,
        `--on-active=${confirmMinutes * 60}s`,
        '/bin/sh',
        '-c',
        rollbackScript(config, rec),
      ],
      'scheduling the rollback',
    );
  await makeDirs(config.selfUpgrade.dropInDir);
  await writeFileAtomic(dropInFile(config), renderImageDropIn(rec.to.image));
  rec.written = true;
  await writeAgentSwitch(config.paths.stateDir, rec);
  await run(config.selfUpgrade.daemonReload, 'daemon-reload');
  tracker.condition(
    'AgentUpgraded',
    'Unknown',
    'Restarting',
    `switching to bundle-agent ${agent.version} (${rec.to.image}); this agent (${running}) restarts`,
  );
  log.info('agent', `switching to bundle-agent ${agent.version} (${rec.to.image}): restarting`, {
    from: running,
    to: agent.version,
    image: rec.to.image,
  });
  await run(config.selfUpgrade.restart, 'the restart');
}

/** A switch that failed on the way: the previous drop-in back, the record failed, said in AgentUpgraded. */
async function undoSwitch(
  ctx: SwitchContext,
  agent: BundleAgent,
  rec: AgentSwitchRecord,
  err: unknown,
): Promise<void> {
  const { config, log, tracker } = ctx;
  const message = `the switch to bundle-agent ${agent.version} failed and was undone: ${oneLine(err)}`;
  await restorePrevious(config, rec).catch((e) =>
    log.warn('agent', `cannot put the previous drop-in back: ${oneLine(e)}`),
  );
  await run(config.selfUpgrade.daemonReload, 'daemon-reload').catch((e) =>
    log.warn('agent', oneLine(e)),
  );
  await writeAgentSwitch(config.paths.stateDir, {
    ...rec,
    state: 'failed',
    at: new Date().toISOString(),
    message,
  }).catch(() => undefined);
  tracker.condition('AgentUpgraded', 'False', 'AgentUpgradeFailed', message);
  log.error('agent', message);
}

/**
 * The running agent is the version a switch went to: the same semver semantics as the decision
 * to switch (gt), so a version that compares equal confirms; one semver cannot read never does.
 */
function sameAgentVersion(running: string, target: string): boolean {
  return !!semverValid(running) && !!semverValid(target) && semverEq(running, target);
}

/** Why `image` (repo@digest) cannot be shown to be in the runtime's store, or undefined when it is (CRI ImageStatus). */
async function imageNotInRuntime(ctx: SwitchContext, image: string): Promise<string | undefined> {
  if (ctx.config.preload.method === 'none')
    return `preload.method is none: ${image} was not pulled into the runtime, and the unit (Pull=never) could not start it`;
  try {
    const inspector = await ctx.runtime.inspector();
    if (!inspector)
      return `the runtime does not answer on its CRI socket: cannot check that it holds ${image}`;
    if (!(await inspector.imageStatus(image))) return `the runtime does not hold ${image}`;
    return undefined;
  } catch (err) {
    return `cannot ask the runtime whether it holds ${image}: ${oneLine(err)}`;
  }
}

/**
 * Once a switch is confirmed: the previous agent image loses the pin the switch gave it, unless
 * a release (or the switch) still keeps it. Changes the runtime's pins: under the load lock.
 */
export async function unpinPreviousAgent(
  ctx: SwitchContext,
  rec: AgentSwitchRecord,
): Promise<void> {
  if (!rec.from.image) return;
  const keep = await refsToKeepPinned(
    ctx.config.paths.stateDir,
    await readReleases(ctx.config.paths.stateDir),
  );
  await ctx.runtime
    .unpin([rec.from.image], keep)
    .catch((err) =>
      ctx.log.warn(
        'agent',
        `could not unpin the previous agent image ${rec.from.image}: ${oneLine(err)}`,
      ),
    );
}

/** Adds refs to the agent's pins (nothing else changes). */
async function keepPinned(runtime: RuntimeTarget, refs: string[]): Promise<void> {
  const pinned = await runtime.pinnedRefs();
  if (refs.every((r) => pinned.has(r))) return;
  await runtime.pin([...new Set([...pinned, ...refs])], []);
}

/**
 * At the daemon's start: a newer agent delivered by MachineConfig (the unit's own Image=,
 * tagged with its version) is overridden by our drop-in until the drop-in goes. When the unit
 * file says so and no switch is pending, the drop-in naming this older agent is removed and
 * the unit restarted on its own image. Returns whether it did.
 */
export async function dropOutdatedDropIn(ctx: SwitchContext): Promise<boolean> {
  const { config, log, tracker } = ctx;
  if (
    config.selfUpgrade.mode !== 'quadlet' ||
    !config.selfUpgrade.dropInDir.endsWith('.container.d')
  )
    return false;
  if (
    (await readAgentSwitch(config.paths.stateDir, (why) => log.warn('agent', why)))?.state ===
    'pending'
  )
    return false;
  const dropIn = await currentDropInImage(config);
  if (!dropIn) return false;
  // the unit file (mounted read-only next to the drop-in directory)
  const unit = (await readSmallText(config.selfUpgrade.dropInDir.slice(0, -'.d'.length))) ?? '';
  const tag = asReference(/^Image=(\S+)$/m.exec(unit)?.[1]);
  let unitVersion: string | undefined;
  try {
    unitVersion = tag ? parseReference(tag).tag : undefined;
  } catch {
    unitVersion = undefined;
  }
  if (
    !isAgentVersion(unitVersion) ||
    !semverValid(ctx.agentVersion) ||
    !semverGt(unitVersion, ctx.agentVersion)
  )
    return false;
  const message = `the unit's own image (${tag}) is bundle-agent ${unitVersion}, newer than this agent (${ctx.agentVersion}) which ${DROP_IN_NAME} names: removing ${DROP_IN_NAME} and restarting on the unit's image`;
  log.warn('agent', message);
  tracker.condition('AgentUpgraded', 'Unknown', 'UnitImageNewer', message);
  await rm(dropInFile(config), { force: true });
  await run(config.selfUpgrade.daemonReload, 'daemon-reload');
  await run(config.selfUpgrade.restart, 'the restart');
  return true;
}

/**
 * At every start: settles a pending switch. The new agent confirms it (and the previous image
 * is unpinned unless a release keeps it); an old agent that finds the drop-in gone reports the
 * rollback; one that still finds it after confirmMinutes undoes it itself.
 */
export async function settleAgentSwitch(
  ctx: SwitchContext,
  now = Date.now(),
  opts: { unpin?: boolean } = {},
): Promise<AgentSwitchRecord | undefined> {
  const { config, log, tracker } = ctx;
  const rec = await readAgentSwitch(config.paths.stateDir, (why) => log.warn('agent', why));
  if (rec?.state !== 'pending') return rec;
  const at = new Date().toISOString();
  if (sameAgentVersion(ctx.agentVersion, rec.to.version)) {
    const done: AgentSwitchRecord = { ...rec, state: 'done', at };
    await writeAgentSwitch(config.paths.stateDir, done);
    tracker.condition(
      'AgentUpgraded',
      'True',
      'AgentUpgraded',
      `bundle-agent ${rec.to.version} runs (was ${rec.from.version})`,
    );
    log.info(
      'agent',
      `bundle-agent ${rec.to.version} started from ${rec.to.image} (was ${rec.from.version})`,
      { from: rec.from.version, to: rec.to.version },
    );
    if (opts.unpin !== false) await unpinPreviousAgent(ctx, done);
    return done;
  }
  const dropIn = await currentDropInImage(config);
  const overdue = now - Date.parse(rec.at) >= config.selfUpgrade.confirmMinutes * 60_000;
  if (dropIn === rec.to.image && !overdue) {
    log.info(
      'agent',
      `a switch to bundle-agent ${rec.to.version} is under way; this agent is ${ctx.agentVersion}`,
    );
    return rec;
  }
  if (dropIn === rec.to.image) {
    await restorePrevious(config, rec);
    await run(config.selfUpgrade.daemonReload, 'daemon-reload').catch((e) =>
      log.warn('agent', oneLine(e)),
    );
  } else if (!rec.written) {
    // cut short (power loss, kill) before the drop-in named the new image: it never ran, so
    // it did not fail; forgotten, and the next load of a bundle carrying it tries again
    const message = `the switch to bundle-agent ${rec.to.version} was cut short before its drop-in was written (crash or power loss): ${ctx.agentVersion} still runs; loading the bundle again tries the switch again`;
    await clearAgentSwitch(config.paths.stateDir);
    tracker.condition('AgentUpgraded', 'False', 'AgentSwitchInterrupted', message);
    log.warn('agent', message, { from: rec.from.version, to: rec.to.version });
    return undefined;
  }
  const message = `bundle-agent ${rec.to.version} did not start and report within ${config.selfUpgrade.confirmMinutes} minutes: back to ${ctx.agentVersion} (${rec.from.image ?? "the unit's own image"})`;
  const back: AgentSwitchRecord = { ...rec, state: 'rolledBack', at, message };
  await writeAgentSwitch(config.paths.stateDir, back);
  tracker.condition('AgentUpgraded', 'False', 'AgentUpgradeRolledBack', message);
  log.error('agent', message, { from: rec.from.version, to: rec.to.version });
  return back;
}
