/**
 * What to send again when the API server refuses a status with 422 Invalid: the same status
 * without the fields its answer names. The case this is for: a newer agent writes a value an
 * older CRD does not know (a new phase, condition type or history state, from before the CRD
 * dropped its enums). Leaving out only those fields keeps everything else (progress, the other
 * conditions, the technician's message) reaching the cluster instead of losing the whole state.
 */
import { REQUIRED, type ResourceStatus } from './resource.js';

type Segment = string | number;

/** "status.conditions[3].type" → ['status', 'conditions', 3, 'type']; undefined when it is not a plain field path. */
export function parseFieldPath(field: string): Segment[] | undefined {
  const out: Segment[] = [];
  for (const part of field.replace(/^\./, '').split('.')) {
    const m = /^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$/.exec(part);
    if (!m) return undefined;
    out.push(m[1]!);
    for (const i of m[2]!.matchAll(/\[(\d+)\]/g)) out.push(Number(i[1]));
  }
  return out;
}

/** The fields a Kubernetes Status answer names as invalid (details.causes[].field), once each. */
export function refusedFields(body: unknown): string[] {
  const causes = (body as { details?: { causes?: unknown } } | undefined)?.details?.causes;
  if (!Array.isArray(causes)) return [];
  const fields = causes
    .map((c) => (c as { field?: unknown } | null)?.field)
    .filter((f): f is string => typeof f === 'string' && f !== '');
  return [...new Set(fields)];
}

function at(root: unknown, path: readonly Segment[]): unknown {
  let n = root;
  for (const s of path)
    n = n !== null && typeof n === 'object' ? (n as Record<Segment, unknown>)[s] : undefined;
  return n;
}

/** `path` as a field name ("status.conditions[3].type"), or, without indexes, as REQUIRED names its schema location ("status.conditions[]"). */
function render(path: readonly Segment[], indexes = true): string {
  return path
    .map((s) => (typeof s === 'number' ? (indexes ? `[${s}]` : '[]') : `.${s}`))
    .join('')
    .slice(1);
}

export interface Reduced {
  status: ResourceStatus;
  /** What was left out, e.g. `status.conditions[3] (status.conditions[3].type "Unpinned")`. */
  dropped: string[];
  /** Required fields sent with the value the cluster already holds, e.g. `status.phase "Pinning"`. */
  kept: string[];
}

/**
 * `status` without the refused `fields` ("status.phase", "status.conditions[1].type", ... as
 * the 422 causes name them): an optional field is left out, a refused part of a list element
 * drops that element, and a required field of the status itself (phase) keeps the value last
 * accepted from this agent (`accepted`), which is what the object already holds. Undefined when
 * that is not possible (a field it cannot place, nothing accepted yet): then nothing is resent.
 */
export function withoutRefused(
  status: ResourceStatus,
  fields: readonly string[],
  accepted: ResourceStatus | undefined,
): Reduced | undefined {
  if (fields.length === 0) return undefined;
  const out = structuredClone(status);
  const root = { status: out };
  const removed = new Map<unknown[], Set<number>>();
  const dropped: string[] = [];
  const kept: string[] = [];
  for (const field of fields) {
    const path = parseFieldPath(field);
    if (!path || path[0] !== 'status' || path.length < 2) return undefined;
    const refused = `${field} ${JSON.stringify(at({ status }, path)) ?? '(absent)'}`;
    // From the refused field up, to the nearest part that may be left out.
    let placed = false;
    for (let depth = path.length - 1; depth >= 1 && !placed; depth--) {
      const key = path[depth]!;
      const parentPath = path.slice(0, depth);
      const parent = at(root, parentPath);
      if (typeof key === 'number') {
        if (!Array.isArray(parent) || key >= parent.length) return undefined;
        if (!removed.has(parent)) removed.set(parent, new Set());
        removed.get(parent)!.add(key);
        dropped.push(`${render(path.slice(0, depth + 1))} (${refused})`);
        placed = true;
      } else if (!(REQUIRED[render(parentPath, false)] ?? []).includes(key)) {
        if (parent === null || typeof parent !== 'object') return undefined;
        delete (parent as Record<string, unknown>)[key];
        dropped.push(
          depth === path.length - 1 ? refused : `${render(path.slice(0, depth + 1))} (${refused})`,
        );
        placed = true;
      } else if (depth === 1) {
        const previous = accepted?.[key as keyof ResourceStatus];
        if (previous === undefined || !mayKeep(key, previous, status)) return undefined;
        (out as unknown as Record<string, unknown>)[key] = structuredClone(previous);
        kept.push(`status.${key} ${JSON.stringify(previous)} (${refused})`);
        placed = true;
      }
    }
    if (!placed) return undefined;
  }
  for (const [list, indexes] of removed) {
    const keep = list.filter((_, i) => !indexes.has(i));
    list.splice(0, list.length, ...keep);
  }
  return { status: out, dropped, kept };
}

/**
 * A kept value must not claim more than the agent knows now: the admin starts the cluster's
 * upgrade when every node says Ready, so a stale "Ready" phase is kept only while the new
 * status's Ready condition is still True.
 */
function mayKeep(key: string, previous: unknown, now: ResourceStatus): boolean {
  if (key !== 'phase' || previous !== 'Ready') return true;
  return now.conditions.some((c) => c.type === 'Ready' && c.status === 'True');
}
