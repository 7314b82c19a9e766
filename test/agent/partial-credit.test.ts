// tier: unit
// The space check's credit for the agent's own partial staging (resume.ts partialCredit): this
// bundle's kept pieces are layout it will not write again; another bundle's partial, and one
// whose marker names no bundle, are room it frees before staging. Real directories.
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { RESUME_MARKER, bundleIdentity } from '@offline-bundle/format';
import { partialCredit } from '@offline-bundle/agent';

const writeResumeMarker = (dir: string, manifestBytes: Buffer) =>
  writeFile(
    join(dir, RESUME_MARKER),
    JSON.stringify({ bundleJson: bundleIdentity(manifestBytes) }) + '\n',
  );

t.test("this bundle's partial counts as staged, every other partial as reclaimable", async (t) => {
  const up = t.testdir();
  const mine = Buffer.from('{"bundle":"mine"}');
  const other = Buffer.from('{"bundle":"other"}');
  const target = join(up, '4.15.1-amd64.partial');
  await mkdir(join(target, 'blobs', 'sha256'), { recursive: true });
  await writeResumeMarker(target, mine);
  await writeFile(join(target, 'blobs', 'sha256', 'a'), Buffer.alloc(300_000, 1));
  const old = join(up, '4.15.0-amd64.partial');
  await mkdir(old);
  await writeResumeMarker(old, other);
  await writeFile(join(old, 'b'), Buffer.alloc(200_000, 2));
  const stray = join(up, 'x-amd64.partial');
  await mkdir(stray);
  await writeFile(join(stray, 'c'), Buffer.alloc(100_000, 3));
  await mkdir(join(up, '4.14.0-amd64'));
  await writeFile(join(up, '4.14.0-amd64', 'd'), Buffer.alloc(50_000, 4));

  const c = await partialCredit(up, target, bundleIdentity(mine));
  t.ok(
    c.alreadyStagedBytes! >= 300_000 && c.alreadyStagedBytes! < 310_000,
    `kept pieces of this bundle: ${c.alreadyStagedBytes}`,
  );
  t.ok(
    c.reclaimableBytes! >= 300_000 && c.reclaimableBytes! < 310_000,
    `another bundle's and an unmarked partial: ${c.reclaimableBytes}`,
  );

  const asOther = await partialCredit(up, target, bundleIdentity(other));
  t.equal(
    asOther.alreadyStagedBytes,
    0,
    "pieces of another bundle in the target are not this bundle's staging",
  );
  t.ok(asOther.reclaimableBytes! >= 600_000, 'they are removed first, so they count as room');

  t.same(
    await partialCredit(join(up, 'absent'), target, bundleIdentity(mine)),
    { reclaimableBytes: 0, alreadyStagedBytes: 0 },
    'no upgrade directory: no credit',
  );
});
