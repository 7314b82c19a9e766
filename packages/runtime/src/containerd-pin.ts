// containerd's CRI pin: the image label io.cri-containerd.pinned=pinned. containerd 1.6.22+
// reports such images as pinned (kubelet then never garbage-collects them); earlier versions
// store the label but report pinned: false.
import { ContainerdImagesClient } from './containerd-images.js';
import { RuntimeError } from './errors.js';
import { assertImageRef } from './validate.js';

export const CONTAINERD_PIN_LABEL = 'io.cri-containerd.pinned';
export const CONTAINERD_PIN_VALUE = 'pinned';

export interface ContainerdPinOptions {
  /** containerd's gRPC socket. */
  address: string;
  /** Default 'k8s.io', the namespace containerd's CRI uses. */
  namespace?: string;
  /** Per call. Default 30 s. */
  timeoutMs?: number;
}

/** Runs `fn` with an images client on the socket `opts.address`, closed afterwards. */
async function withImages<T>(
  opts: ContainerdPinOptions,
  fn: (c: ContainerdImagesClient) => Promise<T>,
): Promise<T> {
  if (!opts.address)
    throw new RuntimeError('INVALID_SPEC', 'containerd pins need the containerd socket address');
  const c = new ContainerdImagesClient(opts.address, {
    namespace: opts.namespace ?? 'k8s.io',
    ...(opts.timeoutMs ? { callTimeoutMs: opts.timeoutMs } : {}),
  });
  try {
    return await fn(c);
  } finally {
    c.close();
  }
}

/** The names of every containerd image record that carries the pin label. */
export async function containerdPinnedRefs(opts: ContainerdPinOptions): Promise<Set<string>> {
  const records = await withImages(opts, (c) => c.list());
  return new Set(
    records
      .filter((r) => r.labels[CONTAINERD_PIN_LABEL] === CONTAINERD_PIN_VALUE)
      .map((r) => r.name),
  );
}

/**
 * Label every containerd image record of each reference (the reference itself and the other
 * names CRI created for the same image: its ID "sha256:..." and its tags, i.e. every record
 * with the same target digest) with io.cri-containerd.pinned=pinned, through containerd's
 * images API (as `ctr images label` does). Returns the names labelled, sorted. A reference
 * containerd does not have: IMAGE_NOT_FOUND; containerd refusing otherwise: PIN_FAILED.
 */
export async function pinContainerdImages(
  refs: string[],
  opts: ContainerdPinOptions,
): Promise<string[]> {
  return (await setContainerdPins(refs, [], opts)).pinned;
}

/**
 * Pins `pin` as pinContainerdImages does, then removes the label from the records of `unpin`
 * (an older release's images), except records of an image that is also pinned. An unpin
 * reference containerd no longer has is skipped: it is already gone.
 */
export async function setContainerdPins(
  pin: string[],
  unpin: string[],
  opts: ContainerdPinOptions,
): Promise<{ pinned: string[]; unpinned: string[] }> {
  const namespace = opts.namespace ?? 'k8s.io';
  for (const r of [...pin, ...unpin]) assertImageRef(r);
  if (pin.length === 0 && unpin.length === 0) return { pinned: [], unpinned: [] };
  return withImages(opts, async (c) => {
    const byName = new Map<string, string>();
    const byDigest = new Map<string, string[]>();
    for (const { name, digest } of await c.list()) {
      byName.set(name, digest);
      byDigest.set(digest, [...(byDigest.get(digest) ?? []), name]);
    }

    const pinnedDigests = new Set<string>();
    const names = new Set<string>();
    for (const ref of pin) {
      const digest = byName.get(ref);
      if (!digest)
        throw new RuntimeError(
          'IMAGE_NOT_FOUND',
          `pin ${ref}: containerd (namespace ${namespace}) has no image of that name`,
        );
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
    await eachLimited(pinned, LABEL_CONCURRENCY, (name) =>
      c.setLabel(name, CONTAINERD_PIN_LABEL, CONTAINERD_PIN_VALUE, `pin ${name}`),
    );
    const unpinned = [...released].sort();
    await eachLimited(unpinned, LABEL_CONCURRENCY, (name) =>
      c.setLabel(name, CONTAINERD_PIN_LABEL, undefined, `unpin ${name}`),
    );
    return { pinned, unpinned };
  });
}

/** One Update per record (the API labels one image per call); a few in flight hide the round trips. */
const LABEL_CONCURRENCY = 8;

/** Runs `fn` over `items`, at most `limit` at once; rejects with the first failure once the running calls settle. */
async function eachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<unknown>,
): Promise<void> {
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
