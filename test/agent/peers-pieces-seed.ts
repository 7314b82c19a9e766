// The peers' tests' seed of a bundle with `pieces` (format pieces.ts): the world's staged layout
// again, its bundle.json with `pieces` of `pieceSize` bytes added and signed again with the
// world's key (the test bundles are written without pieces).
import { cp, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ServedBundle, type PeerApproval } from '@offline-bundle/agent';
import {
  BUNDLE_JSON,
  MIN_PIECE_BYTES,
  SIGNATURE,
  PieceHasher,
  hasPieces,
  layoutEntries,
  parseManifestBytes,
  signBytes,
} from '@offline-bundle/format';
import type { peerWorld } from './peers-setup.js';

type World = Awaited<ReturnType<typeof peerWorld>>;

export async function piecesSeed(
  w: World,
  name = 'seed-pieces',
  pieceSize = MIN_PIECE_BYTES,
): Promise<{ dir: string; served: ServedBundle; approval: PeerApproval }> {
  const dir = join(w.b.dir, name, '1.2.3-amd64');
  await cp(w.seed, dir, { recursive: true });
  const doc = JSON.parse(w.served.manifestBytes.toString('utf8')) as Record<string, unknown>;
  const blobs: Record<string, string> = {};
  for (const e of layoutEntries(w.manifest)) {
    const listed = w.manifest.blobs.find((b) => b.digest === e.digest);
    if (!listed || !hasPieces(listed, pieceSize)) continue;
    const h = new PieceHasher(pieceSize);
    h.update(await readFile(join(dir, e.path)));
    blobs[e.digest] = h.end();
  }
  const bytes = Buffer.from(
    JSON.stringify({ ...doc, pieces: { size: pieceSize, blobs } }, null, 2) + '\n',
  );
  parseManifestBytes(bytes);
  await writeFile(join(dir, BUNDLE_JSON), bytes);
  await writeFile(join(dir, SIGNATURE), signBytes(bytes, w.b.key.privateKey));
  const served = await ServedBundle.fromLayout(dir);
  return { dir, served, approval: { ...w.approval, manifestDigest: served.manifestDigest } };
}
