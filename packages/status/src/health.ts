/**
 * What the agent's /livez and /readyz answer, for a DaemonSet's probes (or a systemd watchdog
 * script). Live: the process answers at all (a blocked event loop answers nothing and the
 * probe's timeout fails it); a failing liveness probe restarts the agent, so nothing a restart
 * cannot cure (a full disk) counts against it. Ready: the agent can do its job: its daemon loop
 * still beats (the status file's heartbeat, read by the same rule as `bundle-agent status`),
 * and it can write its state directory.
 */
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readStatusFile } from './file.js';
import { writerLiveness } from './liveness.js';

export interface HealthCheck {
  name: string;
  ok: boolean;
  /** Why, in one line. */
  detail: string;
}

export interface Health {
  live(): Promise<HealthCheck[]>;
  ready(): Promise<HealthCheck[]>;
}

/** The state directory is written to at most this often by probes, however often they ask. */
export const WRITE_PROBE_INTERVAL_MS = 5_000;

export function agentHealth(opts: {
  statusFile: string;
  stateDir: string;
  now?: () => number;
}): Health {
  const now = opts.now ?? Date.now;
  let probed: { at: number; check: HealthCheck } | undefined;

  const heartbeat = async (): Promise<HealthCheck> => {
    const s = await readStatusFile(opts.statusFile).catch((err: Error) => err);
    if (s instanceof Error)
      return {
        name: 'status-heartbeat',
        ok: false,
        detail: `cannot read ${opts.statusFile}: ${s.message.split('\n')[0]}`,
      };
    if (!s?.writer)
      return {
        name: 'status-heartbeat',
        ok: false,
        detail: `no status written to ${opts.statusFile} yet`,
      };
    const liveness = await writerLiveness(s.writer, new Date(now()));
    return liveness === 'running'
      ? { name: 'status-heartbeat', ok: true, detail: `beat at ${s.writer.heartbeatAt}` }
      : {
          name: 'status-heartbeat',
          ok: false,
          detail: `the daemon loop stopped beating: last heartbeat ${s.writer.heartbeatAt} (${liveness})`,
        };
  };

  const writable = async (): Promise<HealthCheck> => {
    if (probed && now() - probed.at < WRITE_PROBE_INTERVAL_MS) return probed.check;
    const file = join(opts.stateDir, `.ready-probe-${process.pid}`);
    const check = await writeFile(file, '')
      .then(() => rm(file, { force: true }))
      .then(
        () => ({ name: 'state-dir-writable', ok: true, detail: opts.stateDir }),
        (err: Error) => ({
          name: 'state-dir-writable',
          ok: false,
          detail: `cannot write ${opts.stateDir}: ${err.message.split('\n')[0]}`,
        }),
      );
    probed = { at: now(), check };
    return check;
  };

  return {
    live: async () => [{ name: 'ping', ok: true, detail: 'the process answers' }],
    ready: async () => Promise.all([heartbeat(), writable()]),
  };
}
