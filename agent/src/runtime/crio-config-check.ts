// Before a byte leaves the stick: does CRI-O apply the crio.conf.d files the agent writes?
// CRI-O's running config (GET /config on its socket) names no config directory and no
// registries.conf(.d) path: those are command-line settings (--config-dir, --registries-conf,
// --registries-conf-dir) kept outside its TOML. What it does show is the pinned_images list its
// last reload took from the files it reads (ReloadPinnedImages, from 1.28.0). So the check is a
// probe: our pins drop-in gains one entry that names no image (a `.invalid` host), CRI-O is
// reloaded, and its running config must then show that entry. It does not when CRI-O was started
// with another --config-dir, when the reload command does not reach it, or when a crio.conf.d
// file sorting after ours sets pinned_images (our pins would be replaced the same way).
// Once that reload is known to have reached CRI-O, the same reload has also taken a mirror
// drop-in for the probe's repository, and a pull shows whether CRI-O read it (crio-mirror-probe.ts).
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import { hostPath, readPinsDropIn } from '@offline-bundle/runtime';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { crioRunningConfig } from './crio-info-api.js';
import { pullReachesMirror, startMirrorProbeListener, type MirrorProbeListener } from './crio-mirror-probe.js';

/** The probe's pin: a name on a host that can never resolve, so it pins nothing. */
export const CRIO_PROBE_REPOSITORY = 'offline-bundle-probe.invalid/config-check';
/** `systemctl reload crio` returns before CRI-O has re-read its files: how long the entry may take to show. */
export const CRIO_PROBE_SETTLE_MS = 5_000;
const POLL_MS = 250;

/** What the check needs of the CRI-O target (CrioTarget). */
export interface CrioProbeTarget {
  /** Writes our pins drop-in as it would be, plus `entry`; returns its path. */
  writeProbe(entry: string): Promise<string>;
  /** Writes a mirror drop-in sending `repository` to `address`; returns its path. */
  writeMirrorProbe(address: string, repository: string): Promise<string>;
  /** Puts our pins drop-in back as it was before writeProbe and removes the mirror probe (taken by the next reload). */
  restore(): Promise<void>;
  /** A CRI PullImage of `ref`. */
  pull(ref: string, signal: AbortSignal): Promise<unknown>;
  /** Runs reload.command (ReloadFailed when it fails). */
  reload(why: string): Promise<void>;
  /** crio.conf.d files that sort after ours (their pinned_images would replace ours). */
  laterFiles(): Promise<string[]>;
}

/** pinned_images of a running config; undefined where the key is absent (a CRI-O before 1.28). */
async function runningPins(text: string, copy: string): Promise<string[] | undefined> {
  // the agent's one TOML reader reads files; the copy also shows what CRI-O ran with at the last check
  await writeFileAtomic(copy, text);
  if (!/^\s*pinned_images\s*=/m.test(text)) return undefined;
  return readPinsDropIn(copy);
}

/** The running config's pins once `entry` shows, or as they are after `settleMs`. */
async function pinsAfterReload(socket: string, entry: string, copy: string, settleMs: number): Promise<string[] | undefined> {
  const end = Date.now() + settleMs;
  for (;;) {
    const pins = await runningPins(await crioRunningConfig(socket), copy);
    if (pins?.includes(entry) || Date.now() + POLL_MS > end) return pins;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** The one line naming the setting, the value seen and the fix. */
export function ignoredCrioDirMessage(o: { dir: string; file: string; entry: string; seen: string[]; socket: string; reload: string[]; later: string[] }): string {
  const seen = o.seen.length > 3 ? `${JSON.stringify(o.seen.slice(0, 3)).slice(0, -1)}, … ${o.seen.length - 3} more]` : JSON.stringify(o.seen);
  const later = o.later.length ? `, or ${o.later.join(', ')} (sorting after ${o.file}) sets pinned_images` : '';
  return `CRI-O does not apply ${o.dir}: after \`${o.reload.join(' ')}\` its running config (GET /config on ${o.socket}) has pinned_images = ${seen}, without ${o.entry} set by ${o.file}; `
    + `crio was started with another --config-dir (CONTAINER_CONFIG_DIR), or the reload command does not reach it${later}; `
    + `start crio with --config-dir ${o.dir} (see systemctl cat crio and /etc/sysconfig/crio) or set paths.crioDropInDir to the directory it reads, check reload.command, then plug the stick in again`;
}

/** The one line for a CRI-O that took the reload but not the registries drop-in. */
export function ignoredRegistriesDirMessage(o: { dir: string; file: string; ref: string; address: string }): string {
  return `CRI-O does not read ${o.dir}: after a reload that reached it, a pull of ${o.ref} never reached the mirror ${o.address} that ${o.file} names; `
    + `crio was started with another --registries-conf-dir (CONTAINER_REGISTRIES_CONF_DIR), or its user has a ~/.config/containers/registries.conf (then the system registries.conf.d is skipped); `
    + `start crio without them or set paths.registriesDropInDir to the directory it reads, then plug the stick in again`;
}

interface ProbeOutcome {
  /** pinned_images after the reload; undefined: no such key; null: unreadable. */
  pins: string[] | undefined | null;
  /** Whether the probe pull reached the mirror (asked only once the pins showed the reload reached CRI-O). */
  mirrorReached?: boolean;
  pinsFile: string;
  mirrorFile: string;
}

/** Both probe drop-ins, one reload, CRI-O's view; the drop-ins are put back whatever happens. */
async function probe(config: AgentConfig, target: CrioProbeTarget, listener: MirrorProbeListener, entry: string, settleMs: number, log?: Logger): Promise<ProbeOutcome> {
  const copy = join(config.paths.stateDir, 'crio-running-config.toml');
  await makeDirs(config.paths.stateDir);
  try {
    const pinsFile = await target.writeProbe(entry);
    const mirrorFile = await target.writeMirrorProbe(listener.address, CRIO_PROBE_REPOSITORY);
    await target.reload('config check');
    const pins = await pinsAfterReload(config.criSocket, entry, copy, settleMs).catch((err: unknown) => {
      log?.warn('runtime-config', `cannot read CRI-O's running config after the reload (${oneLine(err)}): whether it applies ${hostPath(config.paths.crioDropInDir, config.root)} is not checked`);
      return null;
    });
    if (!pins?.includes(entry)) return { pins, pinsFile, mirrorFile };
    return { pins, mirrorReached: await pullReachesMirror((ref, signal) => target.pull(ref, signal), entry, listener), pinsFile, mirrorFile };
  } finally {
    await target.restore();
  }
}

/**
 * Refuses the load with RuntimeIgnoresMirror when CRI-O does not apply paths.crioDropInDir
 * or, once a reload is known to reach it, does not read paths.registriesDropInDir (see above).
 * Not checked, in one log line: an empty reload.command (nothing to probe with), a
 * CRI-O that does not answer GET /config, one whose running config has no pinned_images (before
 * 1.28: its pins are reported unverifiable later).
 */
export async function checkCrioConfig(config: AgentConfig, target: CrioProbeTarget, log?: Logger, settleMs = CRIO_PROBE_SETTLE_MS): Promise<void> {
  const socket = config.criSocket;
  const dir = hostPath(config.paths.crioDropInDir, config.root);
  if (config.reload.command.length === 0) {
    log?.warn('runtime-config', `reload.command is empty: whether CRI-O applies ${dir} is not checked`);
    return;
  }
  try {
    await crioRunningConfig(socket);
  } catch (err) {
    log?.warn('runtime-config', `CRI-O does not answer GET /config on its socket (${oneLine(err)}): whether it applies ${dir} is not checked`, { socket });
    return;
  }
  const entry = `${CRIO_PROBE_REPOSITORY}:${randomBytes(6).toString('hex')}`;
  const listener = await startMirrorProbeListener();
  const seen = await probe(config, target, listener, entry, settleMs, log).finally(() => listener.close());
  const { pins } = seen;
  if (pins === null) return;
  if (pins === undefined) {
    log?.warn('runtime-config', `CRI-O's running config has no pinned_images after the reload (a CRI-O before 1.28, or reload.command did not reach it): whether it applies ${dir} is not checked`, { socket });
  } else if (!pins.includes(entry)) {
    const later = await target.laterFiles();
    throw new AgentError('RuntimeIgnoresMirror', ignoredCrioDirMessage({ dir, file: hostPath(seen.pinsFile, config.root), entry, seen: pins, socket, reload: config.reload.command, later }));
  } else if (!seen.mirrorReached) {
    const regDir = hostPath(config.paths.registriesDropInDir, config.root);
    throw new AgentError('RuntimeIgnoresMirror', ignoredRegistriesDirMessage({ dir: regDir, file: hostPath(seen.mirrorFile, config.root), ref: entry, address: listener.address }));
  } else {
    log?.info('runtime-config', `CRI-O applies ${dir} and reads ${hostPath(config.paths.registriesDropInDir, config.root)} (after a reload its running config showed the probe pin, and a probe pull reached the probe mirror)`, { socket });
  }
}
