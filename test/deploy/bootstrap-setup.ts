// The set-up bootstrap.test.ts and bootstrap-more.test.ts share: keys, sidecars, nodes and sticks.
// Two files so each stays well inside tap's per-file limit on a loaded machine (282 s in one); each
// builds only the sidecars it alone uses.
import t, { type Test } from 'tap';
import { copyFile, mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import {
  AGENT_REPOSITORY,
  keygen,
  makeSidecar,
  runBootstrap,
  storeContents,
  storedDigest,
  workLeftovers,
  type Node,
  type Sidecar,
} from './lib.js';

export const work = await tmpdir(t, 'ob-bootstrap-');
export const ecdsa = await keygen(work, 'factory');
export const ed25519 = await keygen(work, 'edfactory', 'ed25519');
export const other = await keygen(work, 'other');
// 3 MB of random bytes: the copy and the store take that much room (the disk-full tests)
export const good = await makeSidecar(work, ecdsa, { version: '0.9.0', layerBytes: 3_000_000 });
export const arm = await makeSidecar(work, ecdsa, { version: '0.9.0', arch: 'arm64' });
let nodes = 0;
export const nodeDir = async () => {
  const d = path.join(work, `node-${++nodes}`);
  await mkdir(d);
  return d;
};

/** A stick at MEDIA/bundle-agent/NAME with the bundle and (unless told) the sidecar's two files. */
export async function plug(
  node: Node,
  s: Sidecar,
  opts: { name?: string; sidecar?: boolean } = {},
): Promise<string> {
  const dir = path.join(node.media, 'bundle-agent', opts.name ?? 'sdb1');
  await mkdir(dir, { recursive: true });
  await copyFile(s.bundle, path.join(dir, path.basename(s.bundle)));
  if (opts.sidecar !== false) {
    await copyFile(s.statement, path.join(dir, path.basename(s.statement)));
    await copyFile(s.archive, path.join(dir, path.basename(s.archive)));
  }
  return dir;
}
export const unplug = (node: Node) =>
  rm(path.join(node.media, 'bundle-agent'), { recursive: true, force: true });

export async function nothingLoaded(t: Test, node: Node, r: { dropIn: string | undefined }) {
  t.equal(r.dropIn, undefined, 'no drop-in');
  t.strictSame(
    await storeContents(node),
    { images: [], layers: [] },
    'no image and no layer in the store',
  );
  t.strictSame(await workLeftovers(node), [], 'no copy left in the work directory');
}

export async function loadsGood(t: Test, node: Node, s: Sidecar = good) {
  await unplug(node);
  await plug(node, s);
  const r = await runBootstrap(node);
  t.equal(r.code, 0, `the next good stick loads: ${r.stderr}`);
  t.equal(
    await storedDigest(node, `${AGENT_REPOSITORY}:${s.version}`),
    s.manifest,
    'the agent image is in the store',
  );
  t.match(r.dropIn ?? '', new RegExp(`^Image=${AGENT_REPOSITORY}@${s.manifest}$`, 'm'));
}

export const ISSUE = (line: string) => `Update: ${line}\n\n`;
