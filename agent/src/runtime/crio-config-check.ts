// Before a byte leaves the stick: does CRI-O apply the crio.conf.d files the agent writes?
// CRI-O's running config (GET /config on its socket) names no config directory and no
// registries.conf(.d) path: those are command-line settings (--config-dir, --registries-conf,
// --registries-conf-dir) kept outside its TOML. What it does show is the pinned_images list its
// last reload took from the files it reads (ReloadPinnedImages, from 1.28.0). So the check is a
// probe: our pins drop-in gains one entry that names no image (a `.invalid` host), CRI-O is
// reloaded, and its running config must then show that entry. It does not when CRI-O was started
// with another --config-dir, when the reload command does not reach it, when the reload fails
// (a bad file anywhere in its config stops it before the pins), or when a crio.conf.d file
// sorting after ours sets pinned_images (our pins would be replaced the same way).
// Once that reload is known to have reached CRI-O, the same reload has also taken a mirror
// drop-in for the probe's repository, and a pull shows whether CRI-O read it (crio-mirror-probe.ts).
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { makeDirs, quoteName, writeFileAtomic } from '@offline-bundle/host';
import { hostPath, readPinsDropIn } from '@offline-bundle/runtime';
import type { AgentConfig } from '../config.js';
import { AgentError, oneLine } from '../errors.js';
import type { Logger } from '../log.js';
import { crioRunningConfig } from './crio-info-api.js';
import {
  MIRROR_PROBE_TIMEOUT_MS,
  pullReachesMirror,
  startMirrorProbeListener,
  type MirrorProbeListener,
} from './crio-mirror-probe.js';

/** The probe's pins: names on a host that can never resolve, so they pin nothing. */
export const CRIO_PROBE_HOST = 'offline-bundle-probe.invalid';
const CRIO_PROBE_REPOSITORY = `${CRIO_PROBE_HOST}/config-check`;
/**
 * `systemctl reload crio` returns before CRI-O has re-read its files, and CRI-O takes SIGHUPs
 * through a one-slot channel, so a reload already under way (another tool's) delays ours: how
 * long the entry may take to show.
 */
const CRIO_PROBE_SETTLE_MS = 30_000;
/**
 * While the running config has no pinned_images key at all (a CRI-O before 1.28, where it never
 * comes, or one that has not reloaded yet): how long to wait before the check is given up as not
 * made (a warning, never a refusal), so an old CRI-O does not hold every load for the whole window.
 */
const CRIO_NO_PINS_SETTLE_MS = 5_000;
const POLL_MS = 250;
/** How many untrusted values (pins seen, file names) an error line names, each cut by quoteName. */
const MAX_NAMED = 3;

/** What the check needs of the CRI-O target (CrioTarget). */
interface CrioProbeTarget {
  /** Writes our pins drop-in as its current entries ∪ what it would be ∪ `entry`; returns its path. */
  writeProbe(entry: string): Promise<string>;
  /** Writes a mirror drop-in sending `repository` to `address`; returns its path. */
  writeMirrorProbe(address: string, repository: string): Promise<string>;
  /** Puts our pins drop-in back as it was before writeProbe, removes the mirror probe, and reloads (a failed reload is left to the load's next one). */
  restore(): Promise<void>;
  /** A CRI PullImage of `ref`. */
  pull(ref: string, signal: AbortSignal): Promise<unknown>;
  /** Runs reload.command (ReloadFailed when it fails). */
  reload(why: string): Promise<void>;
  /** crio.conf.d files that sort after ours (their pinned_images would replace ours). */
  laterFiles(): Promise<string[]>;
}

interface CrioCheckOptions {
  settleMs?: number;
  /** The load's stop (SIGTERM): the check ends at once, its files put back. */
  signal?: AbortSignal;
}

/** Whether a pin is one of the probe's (a killed check may have left one in our pins file). */
export function isProbePin(pin: string): boolean {
  return pin.startsWith(`${CRIO_PROBE_HOST}/`);
}

/** pinned_images of a running config; undefined where the key is absent (a CRI-O before 1.28). */
export async function runningPins(text: string, copy: string): Promise<string[] | undefined> {
  // the agent's one TOML reader reads files; the copy also shows what CRI-O ran with at the last check
  await writeFileAtomic(copy, text);
  if (!/^\s*pinned_images\s*=/m.test(text)) return undefined;
  return readPinsDropIn(copy);
}

/** The running config's pins once `entry` shows, or as they are after `settleMs` (CRIO_NO_PINS_SETTLE_MS while it has none). */
async function pinsAfterReload(
  socket: string,
  entry: string,
  copy: string,
  settleMs: number,
  signal?: AbortSignal,
): Promise<string[] | undefined> {
  const start = Date.now();
  for (;;) {
    const pins = await runningPins(await crioRunningConfig(socket), copy);
    const end =
      start + (pins === undefined ? Math.min(settleMs, CRIO_NO_PINS_SETTLE_MS) : settleMs);
    if (pins?.includes(entry) || Date.now() + POLL_MS > end) return pins;
    await sleep(POLL_MS, undefined, signal ? { signal } : {});
  }
}

/** Untrusted values as an error line names them: quoted, controls escaped, each cut, at most MAX_NAMED. */
function namedList(values: readonly string[]): string {
  const shown = values.slice(0, MAX_NAMED).map(quoteName);
  if (values.length > MAX_NAMED) shown.push(`… ${values.length - MAX_NAMED} more`);
  return `[${shown.join(', ')}]`;
}

/** The words every refusal gives for a reload that stopped at a bad file. */
const RELOAD_FAILED =
  'CRI-O\'s reload failed (a bad file in its config stops it: journalctl -u crio shows "Unable to reload configuration" and the file)';

/** The one line naming what was seen, the possible causes and the fix. */
export function ignoredCrioDirMessage(o: {
  dir: string;
  file: string;
  entry: string;
  seen: string[];
  socket: string;
  reload: string[];
  later: string[];
  settleMs: number;
}): string {
  const later = o.later.length
    ? `; ${namedList(o.later)} (sorting after ${o.file}) set pinned_images`
    : '';
  return (
    `CRI-O applying ${o.dir} was not confirmed within ${Math.round(o.settleMs / 1000)} s: after \`${o.reload.join(' ')}\` its running config (GET /config on ${o.socket}) has pinned_images = ${namedList(o.seen)}, without ${o.entry} set by ${o.file}; ` +
    `possible causes: crio was started with another --config-dir (CONTAINER_CONFIG_DIR); ${RELOAD_FAILED}; the reload command does not reach it; crio was still busy with an earlier reload${later}; ` +
    `start crio with --config-dir ${o.dir} (see systemctl cat crio and /etc/sysconfig/crio) or set paths.crioDropInDir to the directory it reads, fix the file journalctl names, check reload.command, then plug the stick in again`
  );
}

/** The one line for a CRI-O that took the reload's pins but not the registries drop-in. */
function ignoredRegistriesDirMessage(o: {
  dir: string;
  file: string;
  ref: string;
  address: string;
}): string {
  return (
    `CRI-O does not read ${o.dir}: after a reload that reached it, a pull of ${o.ref} never reached the mirror ${o.address} that ${o.file} names; ` +
    `possible causes: crio was started with another --registries-conf-dir (CONTAINER_REGISTRIES_CONF_DIR); its user has a ~/.config/containers/registries.conf (then the system registries.conf.d is skipped); ` +
    `${RELOAD_FAILED.replace('stops it', 'stops it after the pins')}; ` +
    `start crio without them or set paths.registriesDropInDir to the directory it reads, fix the file journalctl names, then plug the stick in again`
  );
}

interface ProbeOutcome {
  /** pinned_images after the reload; undefined: no such key; null: unreadable. */
  pins: string[] | undefined | null;
  /** Whether the probe pull reached the mirror (asked only once the pins showed the reload reached CRI-O). */
  mirrorReached?: boolean;
  pinsFile: string;
  mirrorFile: string;
}

function interrupted(): AgentError {
  return new AgentError(
    'Interrupted',
    'the agent stopped during the CRI-O config check: its probe files were put back and CRI-O reloaded; nothing was loaded, the bundle is tried again at the next start',
  );
}

/** Both probe drop-ins, one reload, CRI-O's view; the drop-ins are put back (and CRI-O reloaded) whatever happens. */
async function probe(
  config: AgentConfig,
  target: CrioProbeTarget,
  listener: MirrorProbeListener,
  entry: string,
  o: Required<Pick<CrioCheckOptions, 'settleMs'>> & CrioCheckOptions,
  log?: Logger,
): Promise<ProbeOutcome> {
  const copy = join(config.paths.stateDir, 'crio-running-config.toml');
  await makeDirs(config.paths.stateDir);
  try {
    const pinsFile = await target.writeProbe(entry);
    const mirrorFile = await target.writeMirrorProbe(listener.address, CRIO_PROBE_REPOSITORY);
    await target.reload('config check');
    const pins = await pinsAfterReload(config.criSocket, entry, copy, o.settleMs, o.signal).catch(
      (err: unknown) => {
        if (o.signal?.aborted) throw interrupted();
        log?.warn(
          'runtime-config',
          `cannot read CRI-O's running config after the reload (${oneLine(err)}): whether it applies ${hostPath(config.paths.crioDropInDir, config.root)} is not checked`,
        );
        return null;
      },
    );
    if (!pins?.includes(entry)) return { pins, pinsFile, mirrorFile };
    const mirrorReached = await pullReachesMirror(
      (ref, signal) => target.pull(ref, signal),
      entry,
      listener,
      MIRROR_PROBE_TIMEOUT_MS,
      o.signal,
    ).catch((err: unknown) => {
      throw o.signal?.aborted ? interrupted() : err;
    });
    return { pins, mirrorReached, pinsFile, mirrorFile };
  } finally {
    await target.restore();
  }
}

/**
 * Refuses the load with RuntimeIgnoresMirror when CRI-O does not show that it applies
 * paths.crioDropInDir or, once a reload is known to reach it, does not read
 * paths.registriesDropInDir (see above). Not checked, in one log line: an empty reload.command
 * (nothing to probe with), a CRI-O that does not answer GET /config, one whose running config
 * has no pinned_images (before 1.28: its pins are reported unverifiable later).
 */
export async function checkCrioConfig(
  config: AgentConfig,
  target: CrioProbeTarget,
  log?: Logger,
  opts: CrioCheckOptions = {},
): Promise<void> {
  const o = { settleMs: CRIO_PROBE_SETTLE_MS, ...opts };
  const socket = config.criSocket;
  const dir = hostPath(config.paths.crioDropInDir, config.root);
  if (config.reload.command.length === 0) {
    log?.warn(
      'runtime-config',
      `reload.command is empty: whether CRI-O applies ${dir} is not checked`,
    );
    return;
  }
  try {
    await crioRunningConfig(socket);
  } catch (err) {
    log?.warn(
      'runtime-config',
      `CRI-O does not answer GET /config on its socket (${oneLine(err)}): whether it applies ${dir} is not checked`,
      { socket },
    );
    return;
  }
  if (o.signal?.aborted) throw interrupted();
  const entry = `${CRIO_PROBE_REPOSITORY}:${randomBytes(6).toString('hex')}`;
  const listener = await startMirrorProbeListener();
  const seen = await probe(config, target, listener, entry, o, log).finally(() => listener.close());
  const { pins } = seen;
  if (pins === null) return;
  if (pins === undefined) {
    log?.warn(
      'runtime-config',
      `CRI-O's running config has no pinned_images after the reload (a CRI-O before 1.28, reload.command did not reach it, or its reload failed: journalctl -u crio): whether it applies ${dir} is not checked`,
      { socket },
    );
  } else if (!pins.includes(entry)) {
    const later = await target.laterFiles();
    throw new AgentError(
      'RuntimeIgnoresMirror',
      ignoredCrioDirMessage({
        dir,
        file: hostPath(seen.pinsFile, config.root),
        entry,
        seen: pins,
        socket,
        reload: config.reload.command,
        later,
        settleMs: o.settleMs,
      }),
    );
  } else if (!seen.mirrorReached) {
    const regDir = hostPath(config.paths.registriesDropInDir, config.root);
    throw new AgentError(
      'RuntimeIgnoresMirror',
      ignoredRegistriesDirMessage({
        dir: regDir,
        file: hostPath(seen.mirrorFile, config.root),
        ref: entry,
        address: listener.address,
      }),
    );
  } else {
    log?.info(
      'runtime-config',
      `CRI-O applies ${dir} and reads ${hostPath(config.paths.registriesDropInDir, config.root)} (after a reload its running config showed the probe pin, and a probe pull reached the probe mirror)`,
      { socket },
    );
  }
}
