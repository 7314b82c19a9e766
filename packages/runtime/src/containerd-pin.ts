// containerd's CRI pin: the image label io.cri-containerd.pinned=pinned. containerd 1.7+
// reports such images as pinned (kubelet then never garbage-collects them); 1.6 stores the
// label but reports pinned: false.
import { RuntimeError, firstLine } from './errors.js';
import { execFile } from './exec.js';
import { assertImageRef } from './validate.js';

export const CONTAINERD_PIN_LABEL = 'io.cri-containerd.pinned';
export const CONTAINERD_PIN_VALUE = 'pinned';

export interface ContainerdPinOptions {
  /** The ctr binary. Default 'ctr'. */
  ctr?: string;
  /** containerd's gRPC socket (ctr -a). */
  address: string;
  /** Default 'k8s.io', the namespace containerd's CRI uses. */
  namespace?: string;
  /** Per ctr invocation. Default 30 s. */
  timeoutMs?: number;
}

/** `ctr -a ADDRESS -n NAMESPACE images ARGS...`, its failures as RuntimeErrors. */
function ctrImages(opts: ContainerdPinOptions): (args: string[], what: string) => Promise<string> {
  const ctr = opts.ctr ?? 'ctr';
  const timeoutMs = opts.timeoutMs ?? 30_000;
  if (!opts.address) throw new RuntimeError('INVALID_SPEC', 'containerd pins need the containerd socket address');
  const base = ['-a', opts.address, '-n', opts.namespace ?? 'k8s.io', 'images'];
  return async (args, what) => {
    const r = await execFile(ctr, [...base, ...args], timeoutMs);
    if (r.spawnError) throw new RuntimeError('PIN_FAILED', `${what}: cannot run ${ctr}: ${r.spawnError.message}`, { cause: r.spawnError });
    if (r.timedOut) throw new RuntimeError('TIMEOUT', `${what}: ${ctr} did not finish within ${Math.round(timeoutMs / 1000)} s`);
    if (r.code !== 0) {
      const msg = firstLine(r.stderr) || `exit code ${r.code ?? r.signal}`;
      throw new RuntimeError(/not found/i.test(msg) ? 'IMAGE_NOT_FOUND' : 'PIN_FAILED', `${what}: ${msg}`);
    }
    return r.stdout;
  };
}

/**
 * `ctr images ls` rows. Columns: REF TYPE DIGEST SIZE PLATFORMS LABELS; the first three never
 * contain spaces (SIZE does: "1.2 KiB"), and LABELS, last, is a comma-separated k=v list.
 */
function parseImageList(listing: string): { name: string; digest: string; labels: string }[] {
  const rows: { name: string; digest: string; labels: string }[] = [];
  for (const line of listing.split('\n').slice(1)) {
    const cols = line.trim().split(/\s+/);
    const [name, , digest] = cols;
    if (!name || !digest?.startsWith('sha256:')) continue;
    rows.push({ name, digest, labels: cols.at(-1) ?? '' });
  }
  return rows;
}

/** The names of every containerd image record that carries the pin label. */
export async function containerdPinnedRefs(opts: ContainerdPinOptions): Promise<Set<string>> {
  const listing = await ctrImages(opts)(['ls'], 'list containerd images');
  const pinned = `${CONTAINERD_PIN_LABEL}=${CONTAINERD_PIN_VALUE}`;
  return new Set(parseImageList(listing).filter((r) => r.labels.split(',').includes(pinned)).map((r) => r.name));
}

/**
 * Label every containerd image record of each reference (the reference itself and the other
 * names CRI created for the same image: its ID "sha256:..." and its tags, i.e. every record
 * with the same target digest) with io.cri-containerd.pinned=pinned, through
 * `ctr -a <address> -n <namespace> images label <name> io.cri-containerd.pinned=pinned`.
 * Returns the names labelled, sorted. A reference containerd does not have: IMAGE_NOT_FOUND;
 * ctr failing otherwise: PIN_FAILED.
 */
export async function pinContainerdImages(refs: string[], opts: ContainerdPinOptions): Promise<string[]> {
  return (await setContainerdPins(refs, [], opts)).pinned;
}

/**
 * Pins `pin` as pinContainerdImages does, then removes the label from the records of `unpin`
 * (an older release's images), except records of an image that is also pinned. An unpin
 * reference containerd no longer has is skipped: it is already gone.
 */
export async function setContainerdPins(pin: string[], unpin: string[], opts: ContainerdPinOptions): Promise<{ pinned: string[]; unpinned: string[] }> {
  const namespace = opts.namespace ?? 'k8s.io';
  for (const r of [...pin, ...unpin]) assertImageRef(r);
  if (pin.length === 0 && unpin.length === 0) return { pinned: [], unpinned: [] };
  const run = ctrImages(opts);
  const byName = new Map<string, string>();
  const byDigest = new Map<string, string[]>();
  for (const { name, digest } of parseImageList(await run(['ls'], 'list containerd images'))) {
    byName.set(name, digest);
    byDigest.set(digest, [...(byDigest.get(digest) ?? []), name]);
  }

  const pinnedDigests = new Set<string>();
  const names = new Set<string>();
  for (const ref of pin) {
    const digest = byName.get(ref);
    if (!digest) throw new RuntimeError('IMAGE_NOT_FOUND', `pin ${ref}: containerd (namespace ${namespace}) has no image of that name`);
    pinnedDigests.add(digest);
    for (const n of byDigest.get(digest) ?? [ref]) names.add(n);
  }
  const released = new Set<string>();
  for (const ref of unpin) {
    const digest = byName.get(ref);
    if (!digest || pinnedDigests.has(digest)) continue;
    for (const n of byDigest.get(digest) ?? [ref]) released.add(n);
  }
  const pinned = [...names].sort();
  await eachLimited(pinned, LABEL_CONCURRENCY, (name) => run(['label', name, `${CONTAINERD_PIN_LABEL}=${CONTAINERD_PIN_VALUE}`], `pin ${name}`));
  const unpinned = [...released].sort();
  // an empty value removes the label
  await eachLimited(unpinned, LABEL_CONCURRENCY, (name) => run(['label', name, `${CONTAINERD_PIN_LABEL}=`], `unpin ${name}`));
  return { pinned, unpinned };
}

/**
 * `ctr images label` takes one name per call, and a release has a hundred or more records
 * (each reference and its "sha256:" ID): one after another they cost seconds of process starts.
 */
const LABEL_CONCURRENCY = 8;

/** Runs `fn` over `items`, at most `limit` at once; rejects with the first failure once the running calls settle. */
async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  let failure: { err: unknown } | undefined;
  const worker = async () => {
    while (!failure && next < items.length) {
      const item = items[next++]!;
      try {
        await fn(item);
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failure) throw failure.err;
}
