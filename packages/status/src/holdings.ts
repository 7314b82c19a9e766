/**
 * What a node's container runtime holds, in the bounded form its NodeBundleStatus carries
 * (status.runtime, issue #38): built by the agent from the CRI's ListImages, bounded again
 * before it is written (toResource), and read back by the admin's tools, which trust nothing
 * of it (parseHoldings drops what is malformed).
 *
 * Every name the runtime holds is published as a fingerprint: the first 16 hex digits of the
 * sha256 of its normalized form ("registry/repo@sha256:…" or "registry/repo:tag", as the
 * kubelet looks an image up). 19 bytes a name in JSON instead of ~120: 1,000 images with a tag
 * and a digest each are ~38 KB. A false "held" needs a 64-bit collision.
 */
import { createHash } from 'node:crypto';
import { parseReference, repositoryName } from '@offline-bundle/oci';
import type { RuntimeHoldings } from './model.js';

/** Bounds shared with deploy/crd.yaml (status.runtime; the contract test checks they agree). */
export const HOLDINGS_LIMITS = {
  /** bundle.missing and bundle.unpinned: names each. */
  bundleNames: 100,
  /** One image name: a name of at most 255, a tag of 128, or a digest. */
  imageRef: 400,
  /** held.pinned and held.unpinned together. */
  heldKeys: 4096,
  /** One fingerprint: hex digits. */
  key: 16,
} as const;

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const KEY = /^[0-9a-f]{16}$/;
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** An image name as the runtime looks it up: "registry/repo@digest" (a digest wins over a tag) or "registry/repo:tag" (latest when none). */
export function imageKey(name: string): string | undefined {
  try {
    const ref = parseReference(name);
    return ref.digest
      ? `${repositoryName(ref)}@${ref.digest}`
      : `${repositoryName(ref)}:${ref.tag ?? 'latest'}`;
  } catch {
    return undefined;
  }
}

/** The fingerprint status.runtime.held lists for `name`, or undefined when it is not an image name. */
export function heldKey(name: string): string | undefined {
  const key = imageKey(name);
  return key === undefined ? undefined : sha256(key).slice(0, HOLDINGS_LIMITS.key);
}

/** What ListImages says of one image (CriImage's fields this needs). */
export interface ListedImage {
  repoTags: readonly string[];
  repoDigests: readonly string[];
  pinned: boolean;
}

const count = (n: unknown): number =>
  typeof n === 'number' && Number.isSafeInteger(n) && n > 0 ? n : 0;
const fits = (s: unknown): s is string =>
  typeof s === 'string' && s.length > 0 && s.length <= HOLDINGS_LIMITS.imageRef;

/** The names of a list, at most `max`, each within bounds; `cut` when any was left out. */
function names(list: unknown, max: number): { out: string[]; cut: boolean } {
  const all = Array.isArray(list) ? list : [];
  const ok = [...new Set(all.filter(fits))];
  return { out: ok.slice(0, max), cut: ok.length > max || ok.length !== all.length };
}

/** Fingerprints of two lists, pinned first, at most HOLDINGS_LIMITS.heldKeys in all. */
function keys(
  pinned: unknown,
  unpinned: unknown,
): { pinned: string[]; unpinned: string[]; cut: boolean } {
  const valid = (l: unknown) =>
    (Array.isArray(l) ? l : []).filter((k): k is string => typeof k === 'string' && KEY.test(k));
  const p = [...new Set(valid(pinned))].sort();
  const pinnedSet = new Set(p);
  const u = [...new Set(valid(unpinned))].filter((k) => !pinnedSet.has(k)).sort();
  const max = HOLDINGS_LIMITS.heldKeys;
  const cut = p.length + u.length > max || !Array.isArray(pinned) || !Array.isArray(unpinned);
  return { pinned: p.slice(0, max), unpinned: u.slice(0, Math.max(0, max - p.length)), cut };
}

/**
 * The bounded status.runtime for a runtime that lists `listed`, with `bundleRefs` the names the
 * agent loaded and pins (its bundles, the releases still in use).
 */
export function runtimeHoldings(
  listed: readonly ListedImage[],
  bundleRefs: readonly string[],
  now = new Date(),
): RuntimeHoldings {
  const all = new Set<string>();
  const pinnedByKey = new Map<string, boolean>();
  for (const img of listed) {
    for (const n of [...img.repoTags, ...img.repoDigests]) {
      all.add(n);
      const k = imageKey(n);
      if (k !== undefined) pinnedByKey.set(k, (pinnedByKey.get(k) ?? false) || img.pinned === true);
    }
  }
  const pinsReported = listed.some((i) => i.pinned === true);
  const missing: string[] = [];
  const unpinned: string[] = [];
  const refs = [...new Set(bundleRefs)];
  for (const ref of refs) {
    const k = imageKey(ref);
    const state = k === undefined ? undefined : pinnedByKey.get(k);
    if (state === undefined) missing.push(ref);
    else if (!state && pinsReported) unpinned.push(ref);
  }
  const fp = (pinned: boolean) =>
    [...pinnedByKey]
      .filter(([, p]) => p === pinned)
      .map(([k]) => sha256(k).slice(0, HOLDINGS_LIMITS.key));
  return boundHoldings({
    observedAt: now.toISOString(),
    images: listed.length,
    pinned: listed.filter((i) => i.pinned === true).length,
    references: all.size,
    digest: `sha256:${sha256([...all].sort().join('\n'))}`,
    pinsReported,
    bundle: { refs: refs.length, missing, unpinned, truncated: false },
    held: { pinned: fp(true), unpinned: fp(false), truncated: false },
  })!;
}

/**
 * `v` as status.runtime within the CRD's bounds (lists cut, invalid entries dropped and said
 * by the truncated flags), or undefined when its core (time, counts, digest) is not there or
 * not of its type: the admin's tools read a node's holdings through this, and so ignore
 * whatever a node publishes that is malformed.
 */
export function boundHoldings(v: unknown): RuntimeHoldings | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const h = v as Record<string, unknown>;
  const at =
    typeof h.observedAt === 'string' && !Number.isNaN(Date.parse(h.observedAt))
      ? new Date(h.observedAt).toISOString()
      : undefined;
  const ints = [h.images, h.pinned, h.references].every(
    (n) => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0,
  );
  if (!at || !ints || typeof h.digest !== 'string' || !DIGEST.test(h.digest)) return undefined;
  const b =
    typeof h.bundle === 'object' && h.bundle !== null ? (h.bundle as Record<string, unknown>) : {};
  const missing = names(b.missing, HOLDINGS_LIMITS.bundleNames);
  const unpinned = names(b.unpinned, HOLDINGS_LIMITS.bundleNames);
  const held =
    typeof h.held === 'object' && h.held !== null ? (h.held as Record<string, unknown>) : {};
  const k = keys(held.pinned, held.unpinned);
  return {
    observedAt: at,
    images: count(h.images),
    pinned: count(h.pinned),
    references: count(h.references),
    digest: h.digest,
    pinsReported: h.pinsReported === true,
    // a list left out says nothing, not "none": what it would name is unknown, never held
    bundle: {
      refs: count(b.refs),
      missing: missing.out,
      unpinned: unpinned.out,
      truncated:
        b.truncated === true ||
        missing.cut ||
        unpinned.cut ||
        (count(b.refs) > 0 && !(Array.isArray(b.missing) && Array.isArray(b.unpinned))),
    },
    held: {
      pinned: k.pinned,
      unpinned: k.unpinned,
      truncated:
        held.truncated === true ||
        k.cut ||
        (count(h.images) > 0 && !(Array.isArray(held.pinned) && Array.isArray(held.unpinned))),
    },
  };
}

/** pinned, unpinned, absent; unknown when absent from a list that was cut (or the node published nothing). */
export type HeldState = 'pinned' | 'unpinned' | 'absent' | 'unknown';

/** Whether holdings `h` (boundHoldings' output) hold `image` under the name it is asked by, and pinned. */
export function heldState(h: RuntimeHoldings | undefined, image: string): HeldState {
  if (!h) return 'unknown';
  const k = heldKey(image);
  if (k === undefined) return 'absent';
  if (h.held.pinned.includes(k)) return h.pinsReported ? 'pinned' : 'unpinned';
  if (h.held.unpinned.includes(k)) return 'unpinned';
  return h.held.truncated ? 'unknown' : 'absent';
}
