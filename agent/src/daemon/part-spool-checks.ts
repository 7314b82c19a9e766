// Whether the parts on a stick and those copied before can be one split bundle, judged from
// their names and sizes alone, before a byte is copied: every refusal names the part and the fix.
import { MAX_PARTS } from '@offline-bundle/format';
import { AgentError } from '../errors.js';
import { numberRanges } from './part-spool-words.js';

/** One part as known: on the stick now, or copied before. */
export interface KnownPart {
  name: string;
  n: number;
  count: number;
  size: number;
  /** Where it is: "this stick" or "copied before". */
  where: string;
}

const mixed = (message: string) => new AgentError('PartsMixed', message);

/** The count the parts on one stick agree on, or PartsMixed naming two that do not. */
export function stickCount(base: string, parts: readonly KnownPart[]): number {
  const first = parts[0]!;
  const odd = parts.find((p) => p.count !== first.count);
  if (odd)
    throw mixed(
      `${first.name} says ${base} has ${first.count} parts, ${odd.name} ${odd.count}: they are of two different splits; keep the parts of one split on the sticks`,
    );
  if (first.count > MAX_PARTS)
    throw new AgentError(
      'PartsIncomplete',
      `${first.name} says ${base} has ${first.count} parts, more than the ${MAX_PARTS} a bundle may be split into: split it again with a larger --size`,
    );
  const beyond = parts.find((p) => p.n < 1 || p.n > first.count);
  if (beyond)
    throw mixed(
      `${beyond.name} is numbered outside 1 to ${first.count}: it does not belong to this split of ${base}; remove it`,
    );
  const twice = parts.find((p, i) => parts.findIndex((q) => q.n === p.n) !== i);
  if (twice)
    throw mixed(
      `part ${twice.n} of ${first.count} of ${base} is on this stick twice (${parts.find((q) => q.n === twice.n)!.name} and ${twice.name}): keep the one of the same split as the others`,
    );
  return first.count;
}

/** The stick's count against the one of the parts copied before. */
export function sameCount(
  base: string,
  stick: readonly KnownPart[],
  held: readonly KnownPart[],
): void {
  if (held.length === 0 || held[0]!.count === stick[0]!.count) return;
  throw mixed(
    `${stick[0]!.name} on this stick says ${base} has ${stick[0]!.count} parts, the parts ${numberRanges(held.map((p) => p.n))} copied before say ${held[0]!.count}: they are of two different splits; the copied parts were dropped: plug in the sticks of one split, one after another`,
  );
}

/** The size most known parts but the last have (ties: the larger, so a part cut short never sets it). */
function splitSize(parts: readonly KnownPart[], count: number): number | undefined {
  const votes = new Map<number, number>();
  for (const p of parts) if (p.n !== count) votes.set(p.size, (votes.get(p.size) ?? 0) + 1);
  return [...votes].sort((a, b) => b[1] - a[1] || b[0] - a[0])[0]?.[0];
}

/**
 * A part both on the stick and copied before must be the same size (its bytes are compared
 * after); every part but the last the split size; the last not longer, and none empty.
 */
export function checkSizes(
  base: string,
  count: number,
  stick: readonly KnownPart[],
  held: readonly KnownPart[],
): number | undefined {
  for (const s of stick) {
    const h = held.find((p) => p.n === s.n);
    if (h && h.size !== s.size)
      throw differentDuplicate(base, s, `${s.size} bytes, the one copied before ${h.size}`);
  }
  const all = [...held, ...stick.filter((s) => !held.some((h) => h.n === s.n))];
  const full = splitSize(all, count);
  for (const p of all) {
    const last = p.n === count;
    if (p.size === 0 || (!last && full !== undefined && p.size < full)) {
      throw new AgentError(
        'PartCutShort',
        `part ${p.n} of ${count} (${p.name}, ${p.where}) is ${p.size} bytes, ${last || full === undefined ? 'empty' : `the other parts ${full}`}: it was cut short; copy it again from the same split of ${base} and plug the sticks in again`,
      );
    }
    if (full !== undefined && p.size > full) {
      throw mixed(
        `part ${p.n} of ${count} (${p.name}, ${p.where}) is ${p.size} bytes, longer than the ${full} of the other parts: it is of another split or another bundle named ${base}; the copied parts were dropped: plug in the sticks of one split, one after another`,
      );
    }
  }
  return full;
}

/** Part `s` on the stick is not the part of that number copied before. */
export function differentDuplicate(base: string, s: KnownPart, how: string): AgentError {
  return mixed(
    `part ${s.n} of ${s.count} (${s.name}) is on this stick and was copied before from another stick, and the two differ (${how}): they are of two different bundles named ${base}; the copied parts were dropped: plug in the sticks of one bundle, one after another`,
  );
}
