// What the agent remembers of a switch to a newer agent image: kept in the state directory so
// the agent that starts next (the new one, or the old one after a rollback) knows how it went.
import { rm } from 'node:fs/promises';
import { readStateJson } from './state-json.js';
import { join } from 'node:path';
import { formatReference, parseReference } from '@offline-bundle/oci';
import { makeDirs, writeFileAtomic } from '@offline-bundle/host';
import { AGENT_REPOSITORY, isAgentVersion } from '@offline-bundle/format';

const BY_DIGEST = new RegExp(`^${AGENT_REPOSITORY.replace(/[.]/g, '\\.')}@sha256:[0-9a-f]{64}$`);
/** Our own repository by digest: the only image a drop-in of ours, or the guard's rollback, may name. */
export const isAgentImageByDigest = (v: unknown): v is string =>
  typeof v === 'string' && BY_DIGEST.test(v);

/**
 * An image reference the runtime's pins may hold: printable, no spaces, and already in the
 * form parseReference/formatReference give it (so nothing is dropped or added on the way).
 */
export function isCanonicalReference(v: unknown): v is string {
  if (typeof v !== 'string' || v.length > 1024 || !/^[\x21-\x7e]+$/.test(v)) return false;
  try {
    return formatReference(parseReference(v)) === v;
  } catch {
    return false;
  }
}

/** The running agent's own version as recorded (its package version): the bundle.json agent rule's characters. */
const RUNNING_VERSION = /^[0-9A-Za-z.+-]{1,64}$/;

export interface AgentSwitchRecord {
  /** pending: the drop-in is written and the restart asked for; done: the new agent reported; rolledBack / failed: the old one runs. */
  state: 'pending' | 'done' | 'rolledBack' | 'failed';
  /** image: what the old agent ran; dropIn: whether our drop-in named it (else the unit's own Image=). */
  from: { version: string; image?: string; dropIn?: boolean };
  to: { version: string; image: string; digest: string };
  /** Set (still pending) once the drop-in naming `to` is written: a pending record without it was cut short before. */
  written?: boolean;
  /** The confirmation window (selfUpgrade.confirmMinutes × 60), for the host's boot guard. */
  confirmSeconds?: number;
  /** When the switch was asked for (pending) or settled. */
  at: string;
  /** Why it was rolled back or failed. */
  message?: string;
}

const recordFile = (stateDir: string) => join(stateDir, 'agent-switch.json');
/**
 * Exists exactly while a switch is unconfirmed: the host-side rollback script and the boot
 * guard (deploy/openshift/switch-guard.sh) test for it. Three lines: the new digest, the
 * window in seconds, the image of the drop-in to put back or - (none).
 */
export const pendingMarker = (stateDir: string) => join(stateDir, 'agent-switch.pending');
/** The guard's count of starts of the new image while the switch is unconfirmed. */
const startsFile = (stateDir: string) => join(stateDir, 'agent-switch.starts');

/** The marker's text for a pending switch. */
function renderPendingMarker(rec: AgentSwitchRecord): string {
  const previous = rec.from.dropIn && rec.from.image ? rec.from.image : '-';
  return `${rec.to.digest}\n${rec.confirmSeconds ?? 600}\n${previous}\n`;
}

const STATES = ['pending', 'done', 'rolledBack', 'failed'];
const isStr = (v: unknown): v is string =>
  typeof v === 'string' && v.length > 0 && v.length <= 4096;
const isObj = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** What is wrong with a record read back, or undefined when it has the shape the agent relies on. */
function recordDamage(r: unknown): string | undefined {
  if (!isObj(r)) return 'not an object';
  if (!STATES.includes(r.state as string))
    return 'state is not one of pending, done, rolledBack, failed';
  if (!isObj(r.from) || typeof r.from.version !== 'string' || !RUNNING_VERSION.test(r.from.version))
    return 'from.version is not a version';
  if (r.from.dropIn !== undefined && typeof r.from.dropIn !== 'boolean')
    return 'from.dropIn is not a boolean';
  // from.image goes back into the drop-in (a unit file) and into the pins: never taken as it is
  if (
    r.from.image !== undefined &&
    !(r.from.dropIn ? isAgentImageByDigest(r.from.image) : isCanonicalReference(r.from.image))
  ) {
    return r.from.dropIn
      ? `from.image is not ${AGENT_REPOSITORY}@sha256:<64 hex>`
      : 'from.image is not an image reference';
  }
  if (!isObj(r.to) || !isAgentVersion(r.to.version)) return 'to.version is not an agent version';
  if (typeof r.to.digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(r.to.digest))
    return 'to.digest is not a sha256 digest';
  if (r.to.image !== `${AGENT_REPOSITORY}@${r.to.digest}`)
    return `to.image is not ${AGENT_REPOSITORY}@<to.digest>`;
  if (!isStr(r.at) || Number.isNaN(Date.parse(r.at))) return 'at is not a date';
  if (r.message !== undefined && typeof r.message !== 'string') return 'message is not a string';
  if (r.written !== undefined && typeof r.written !== 'boolean') return 'written is not a boolean';
  if (
    r.confirmSeconds !== undefined &&
    !(Number.isInteger(r.confirmSeconds) && (r.confirmSeconds as number) > 0)
  )
    return 'confirmSeconds is not a positive whole number';
  return undefined;
}

/**
 * The switch record, or undefined when there is none or it is damaged (then `onDamaged` says
 * why): a damaged record only forgets one switch, and the next bundle tries again.
 */
export async function readAgentSwitch(
  stateDir: string,
  onDamaged?: (why: string) => void,
): Promise<AgentSwitchRecord | undefined> {
  const r = await readStateJson(recordFile(stateDir));
  if (r === undefined) return undefined;
  const damage = recordDamage(r);
  if (damage) {
    onDamaged?.(`${recordFile(stateDir)} is damaged (${damage}): treated as absent`);
    return undefined;
  }
  return r as AgentSwitchRecord;
}

export async function writeAgentSwitch(stateDir: string, rec: AgentSwitchRecord): Promise<void> {
  await makeDirs(stateDir);
  await writeFileAtomic(recordFile(stateDir), JSON.stringify(rec, null, 2) + '\n');
  // a new pending switch counts its starts from none; a settled one has no count
  if (!(rec.state === 'pending' && rec.written)) await rm(startsFile(stateDir), { force: true });
  if (rec.state === 'pending')
    await writeFileAtomic(pendingMarker(stateDir), renderPendingMarker(rec));
  else await rm(pendingMarker(stateDir), { force: true });
}

/** Forgets a switch that never got under way (no record, no marker). */
export async function clearAgentSwitch(stateDir: string): Promise<void> {
  await rm(pendingMarker(stateDir), { force: true });
  await rm(startsFile(stateDir), { force: true });
  await rm(recordFile(stateDir), { force: true });
}

/**
 * The agent images the switch keeps pinned, whatever happens to the releases that carried
 * them: the one that runs, and while a switch is unconfirmed the previous one too (a rollback
 * needs it).
 */
export async function agentSwitchPins(stateDir: string): Promise<string[]> {
  const r = await readAgentSwitch(stateDir);
  if (!r) return [];
  if (r.state === 'pending') return [r.to.image, ...(r.from.image ? [r.from.image] : [])];
  if (r.state === 'done') return [r.to.image];
  return r.from.image ? [r.from.image] : [];
}

/**
 * The refs that must stay pinned besides a release's own: those of the releases still kept
 * (`releases`), and the agent images the switch keeps (agentSwitchPins). The one list a load,
 * `releases forget`/`prune` and a confirmed switch unpin against.
 */
export async function refsToKeepPinned(
  stateDir: string,
  releases: readonly { refs: readonly string[] }[],
): Promise<string[]> {
  return [...new Set([...releases.flatMap((r) => r.refs), ...(await agentSwitchPins(stateDir))])];
}
