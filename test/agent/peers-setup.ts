// Shared pieces of the peer transfer tests: a signed bundle staged as a stick stages it (the
// seed), real certificates from deploy/openshift/peer-ca.mjs, peer servers on 127.0.0.x ports,
// a fixed PeerDirectory, and a digest of every file of a layout to compare two stagings.
import { createHash } from 'node:crypto';
import { readFile, readdir, lstat } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { Readable } from 'node:stream';
import {
  PeerCounters,
  ServedBundle,
  fetchFromPeers,
  loadPeerCredentials,
  startPeerServer,
  type PeerApproval,
  type PeerDirectory,
  type SpaceCheck,
  type PeerEndpoint,
  type PeerFetchOptions,
  type PeerOffer,
  type PeerServerOptions,
  type RunningPeerServer,
} from '@offline-bundle/agent';
import { extractBundle, finishLayout, openBundle } from '@offline-bundle/format';
import { makeBundle } from '../format/craft.js';
import { makePeerCa } from '../../deploy/openshift/peer-ca.mjs';

type T = Parameters<typeof makeBundle>[0];
export const MiB = 1024 * 1024;

/** A stand-in for the load's space check that lets every fetch through: these tests do not check space. */
export const fits: SpaceCheck = async (m) => ({
  mode: 'staged',
  message: 'fits (the test does not check space here)',
  figures: {
    layoutBytes: m.totals.layoutBytes,
    alreadyStagedBytes: 0,
    reclaimableBytes: 0,
    growth: { bytes: 0, heldBytes: 0, heldLayers: 0 },
    thresholdsFrom: 'none (a stand-in)',
  },
});

/** Every regular file under `dir` (relative path → sha256), the resume marker and temp files included. */
export async function treeOf(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (d: string) => {
    for (const n of await readdir(d)) {
      const p = join(d, n);
      const st = await lstat(p);
      if (st.isDirectory()) await walk(p);
      else
        out[relative(dir, p)] = createHash('sha256')
          .update(await readFile(p))
          .digest('hex');
    }
  };
  await walk(dir);
  return out;
}

/** A mutable directory: what the API would say, fixed by the test. */
export class FixedDirectory implements PeerDirectory {
  constructor(
    public approvals: PeerApproval[],
    public peers: PeerEndpoint[],
  ) {}
  async approved() {
    return this.approvals;
  }
  async peersFor(digest: string) {
    return this.approvals.some((a) => a.manifestDigest === digest) ? this.peers : [];
  }
}

export const endpoint = (node: string, url: string, complete = true): PeerEndpoint => ({
  node,
  url,
  complete,
  verifiedBlobs: 0,
});

/** An offer that passes its bytes through `change` (a peer that lies or dies mid-blob). */
export function altered(
  base: PeerOffer,
  change: (digest: string, data: Readable, start: number) => Readable,
): PeerOffer {
  return {
    manifestDigest: base.manifestDigest,
    manifestBytes: base.manifestBytes,
    signature: base.signature,
    complete: base.complete,
    verifiedDigests: (n) => base.verifiedDigests(n),
    size: (d) => base.size(d),
    open: async (d, s, e) => {
      const data = await base.open(d, s, e);
      const out = change(d, data, s);
      // .pipe() does not pass an error on: the server must see the read fail
      if (out !== data) data.on('error', (err) => out.destroy(err));
      return out;
    },
  };
}

export async function peerWorld(t: T, layerSizes = [3 * MiB, 2 * MiB, 1 * MiB, 512 * 1024]) {
  const b = await makeBundle(t, { layerSizes });
  const ca = makePeerCa(join(b.dir, 'peer-ca')) as {
    ca: string;
    cert: string;
    key: string;
    caKey: string;
  };
  const credentials = await loadPeerCredentials(ca);
  const seed = join(b.dir, 'seed', '1.2.3-amd64');
  const source = await openBundle(b.path);
  const v = await extractBundle(source, seed, { trust: b.trust }).finally(() => source.close());
  const served = await ServedBundle.fromLayout(seed);
  const approval: PeerApproval = {
    manifestDigest: served.manifestDigest,
    version: v.manifest.release.version,
    signer: b.key.trusted.fingerprint,
  };
  let nodes = 0;
  const server = async (
    over: Partial<PeerServerOptions> & { offer?: PeerOffer } = {},
  ): Promise<RunningPeerServer> => {
    const offer = over.offer ?? served;
    const s = await startPeerServer({
      credentials,
      host: `127.0.0.${2 + nodes++}`,
      port: 0,
      uploadBytesPerSecond: 1024 * MiB,
      downloaders: 4,
      bundle: (d) => (d === offer.manifestDigest ? offer : undefined),
      ...over,
    });
    t.teardown(() => s.close());
    return s;
  };
  /**
   * A fetch from peers; its whole staging then put in place as the load does first (pipeline
   * openStaged), so the layout compares with a stick's. `leaveStaged`: left as the fetch leaves it.
   */
  const fetch = (
    upgradeDir: string,
    directory: PeerDirectory,
    extra: Partial<PeerFetchOptions> = {},
    opts: { leaveStaged?: boolean } = {},
  ) => {
    const counters = extra.counters ?? new PeerCounters();
    const result = fetchFromPeers({
      approval,
      directory,
      credentials,
      trust: b.trust,
      upgradeDir,
      fsync: false,
      connectTimeoutMs: 1000,
      counters,
      planSpace: fits,
      ...extra,
    }).then(async (r) => {
      if (!r.already && !opts.leaveStaged) await finishLayout(`${r.target}.partial`, r.target, r);
      return r;
    });
    return { result, counters };
  };
  return {
    b,
    ca,
    credentials,
    seed,
    served,
    approval,
    server,
    fetch,
    layoutBytes: v.manifest.totals.layoutBytes,
    manifest: v.manifest,
  };
}
