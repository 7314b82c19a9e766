// The kubelet deletes images once its image filesystem is as full as imageGCHighThresholdPercent,
// and evicts pods once imagefs.available or nodefs.available falls under its evictionHard
// threshold (or its evictionSoft one, after a grace period a load's bytes outlast): a load that
// crosses either undoes itself or harms the node's workloads. So the space check reads the
// node's own kubelet configuration and stays below all of them, rounding as the kubelet does.
import { readSmallFile } from '@offline-bundle/host';
import { formatBytes } from '@offline-bundle/cli';
import { parse as parseYaml } from 'yaml';

/** Largest kubelet config read: OpenShift's /etc/kubernetes/kubelet.conf is some 2 KiB, a heavily tuned one a few tens. */
export const MAX_KUBELET_CONFIG_BYTES = 256 * 1024;

/** An eviction threshold on available bytes: a share of the filesystem or an absolute quantity. */
export type Threshold = { percent: number } | { bytes: number };

export interface KubeletThresholds {
  /** Image GC starts at this usage (percent of the image filesystem); 100 disables it. */
  gcHighPercent: number;
  imagefsAvailable: Threshold;
  nodefsAvailable: Threshold;
  /** evictionSoft's, when set: the kubelet evicts after a grace period, and a load's bytes stay longer. */
  imagefsSoft?: Threshold;
  nodefsSoft?: Threshold;
  /** Where the figures come from: the file read, or why the defaults are used. */
  source: string;
}

/**
 * The kubelet's defaults (k8s.io/kubelet/config/v1beta1: imageGCHighThresholdPercent 85,
 * evictionHard imagefs.available 15%, nodefs.available 10%). OpenShift's kubelet.conf
 * (openshift/machine-config-operator, templates/{master,worker}/01-*-kubelet/_base/files/kubelet.yaml)
 * sets neither, so these are OpenShift's defaults too unless a KubeletConfig changes them.
 */
export const KUBELET_DEFAULTS: Omit<KubeletThresholds, 'source'> = {
  gcHighPercent: 85,
  imagefsAvailable: { percent: 15 },
  nodefsAvailable: { percent: 10 },
};

const BINARY: Record<string, number> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};
const DECIMAL: Record<string, number> = {
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

/** A Kubernetes quantity ("10Gi", "500M", "1e9", "1234") in bytes; undefined when it is none. */
export function parseQuantity(text: string): number | undefined {
  const m = /^([+]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)|[eE]([+-]?\d+))?$/.exec(
    text.trim(),
  );
  if (!m) return undefined;
  const unit = m[2] ? (BINARY[m[2]] ?? DECIMAL[m[2]]!) : 1;
  const bytes = Number(m[1]) * unit * (m[3] ? 10 ** Number(m[3]) : 1);
  return Number.isFinite(bytes) ? Math.ceil(bytes) : undefined;
}

/** An evictionHard value ("15%", "10Gi"); undefined when it is neither. */
export function parseThreshold(value: unknown): Threshold | undefined {
  if (typeof value !== 'string') return undefined;
  const pct = /^(\d+(?:\.\d+)?)%$/.exec(value.trim());
  if (pct) return Number(pct[1]) <= 100 ? { percent: Number(pct[1]) } : undefined;
  const bytes = parseQuantity(value);
  return bytes === undefined ? undefined : { bytes };
}

/**
 * The available bytes under which the kubelet evicts (it evicts when available < this), rounded
 * as it does: the percentage parsed as a 32-bit float and divided by 100 in 32 bits, multiplied
 * by the capacity in 64 bits, truncated to whole bytes.
 */
export function thresholdBytes(t: Threshold, size: number): number {
  if ('bytes' in t) return t.bytes;
  const share32 = Math.fround(Math.fround(t.percent) / 100);
  return Math.trunc(size * share32);
}

/** The usage the kubelet's image GC sees: 100 minus the whole percent available, truncated (BigInt: capacity * 100 passes 2^53). */
export function kubeletUsagePercent(available: number, size: number): number {
  if (size <= 0) return 100;
  return 100 - Number((BigInt(Math.trunc(available)) * 100n) / BigInt(Math.trunc(size)));
}

/**
 * The fewest available bytes that keep the kubelet's image GC away at `highPercent`: it collects
 * when its usage reaches the threshold, so whenever available * 100 < (101 - high) * capacity
 * (with 85: under 16% free, not 15%).
 */
export function imageGcKeepBytes(size: number, highPercent: number): number {
  const needed = BigInt(101 - highPercent) * BigInt(Math.trunc(size));
  return Number((needed + 99n) / 100n);
}

/** "15%" or "10 GiB", as the kubelet's config says it. */
export function thresholdText(t: Threshold): string {
  return 'bytes' in t ? formatBytes(t.bytes) : `${t.percent}%`;
}

const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The thresholds a KubeletConfiguration document sets; what it leaves out, or sets to
 * something unreadable, keeps the default (`notes` says which). A kubelet given a partial
 * evictionHard may treat the rest as unset (0); the default is kept as the safer figure.
 */
export function thresholdsOf(doc: unknown, notes: string[]): Omit<KubeletThresholds, 'source'> {
  const out: Omit<KubeletThresholds, 'source'> = { ...KUBELET_DEFAULTS };
  if (!isMapping(doc)) {
    notes.push('not a mapping');
    return out;
  }
  const gc = doc.imageGCHighThresholdPercent;
  if (typeof gc === 'number' && Number.isInteger(gc) && gc >= 0 && gc <= 100)
    out.gcHighPercent = gc;
  else if (gc !== undefined)
    notes.push(`imageGCHighThresholdPercent ${JSON.stringify(gc)} is not a whole percent`);
  readEvictions(
    doc,
    'evictionHard',
    { 'imagefs.available': 'imagefsAvailable', 'nodefs.available': 'nodefsAvailable' },
    out,
    notes,
  );
  readEvictions(
    doc,
    'evictionSoft',
    { 'imagefs.available': 'imagefsSoft', 'nodefs.available': 'nodefsSoft' },
    out,
    notes,
  );
  return out;
}

type ThresholdKey = 'imagefsAvailable' | 'nodefsAvailable' | 'imagefsSoft' | 'nodefsSoft';

/** The disk signals of one eviction map (evictionHard, evictionSoft) into `out`, noting what is unreadable. */
function readEvictions(
  doc: Record<string, unknown>,
  field: string,
  keys: Record<string, ThresholdKey>,
  out: Omit<KubeletThresholds, 'source'>,
  notes: string[],
): void {
  const map = doc[field];
  if (map === undefined || map === null) return;
  if (!isMapping(map)) {
    notes.push(`${field} is not a mapping`);
    return;
  }
  for (const [signal, key] of Object.entries(keys)) {
    if (map[signal] === undefined) continue;
    const th = parseThreshold(map[signal]);
    if (th) out[key] = th;
    else
      notes.push(
        `${field} ${signal} ${JSON.stringify(map[signal]).slice(0, 40)} is not a percentage or quantity`,
      );
  }
}

/**
 * The thresholds from the first of `paths` that exists (OpenShift's, then kubeadm's place by
 * default), bounded in size; the kubelet's defaults when none can be read, saying why in `source`.
 */
export async function readKubeletThresholds(paths: readonly string[]): Promise<KubeletThresholds> {
  const missing: string[] = [];
  for (const path of paths) {
    let text: string;
    try {
      text = (await readSmallFile(path, MAX_KUBELET_CONFIG_BYTES)).bytes.toString('utf8');
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') {
        missing.push(path);
        continue;
      }
      return {
        ...KUBELET_DEFAULTS,
        source: `the kubelet's defaults (${path} is unreadable: ${(err as Error).message.split('\n')[0]})`,
      };
    }
    let doc: unknown;
    try {
      doc = parseYaml(text, { maxAliasCount: 100 });
    } catch (err) {
      return {
        ...KUBELET_DEFAULTS,
        source: `the kubelet's defaults (${path} is not YAML or JSON: ${(err as Error).message.split('\n')[0]})`,
      };
    }
    const notes: string[] = [];
    const t = thresholdsOf(doc, notes);
    return { ...t, source: notes.length ? `${path} (defaults where ${notes.join('; ')})` : path };
  }
  return {
    ...KUBELET_DEFAULTS,
    source: `the kubelet's defaults (no kubelet config at ${missing.join(' or ') || 'any configured path'})`,
  };
}
