// tier: unit
// The running release remembered from the cluster (<stateDir>/cluster-release.json): what a
// node uses when its API server is away. Written atomically and only when it changes; read
// back only when it has our shape (a damaged, foreign or oversized file counts as none).
import t from 'tap';
import { stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  CLUSTER_RELEASE_FILE,
  rememberClusterRelease,
  rememberedClusterRelease,
} from '@offline-bundle/agent';
import { tmpdir } from '../helpers/tmp.mjs';

const IMAGE = `quay.io/openshift-release-dev/ocp-release@sha256:${'a'.repeat(64)}`;

t.test('remembered, read back, rewritten only on a change', async (t) => {
  const dir = await tmpdir(t, 'ob-remembered-');
  t.equal(await rememberedClusterRelease(dir), undefined, 'nothing yet');
  await rememberClusterRelease(
    dir,
    { version: '4.15.1', image: IMAGE },
    new Date('2026-11-01T00:00:00Z'),
  );
  t.same(await rememberedClusterRelease(dir), {
    version: '4.15.1',
    image: IMAGE,
    seenAt: '2026-11-01T00:00:00.000Z',
  });
  const first = (await stat(join(dir, CLUSTER_RELEASE_FILE))).mtimeMs;
  await new Promise((r) => setTimeout(r, 20));
  await rememberClusterRelease(dir, { version: '4.15.1', image: IMAGE });
  t.equal(
    (await stat(join(dir, CLUSTER_RELEASE_FILE))).mtimeMs,
    first,
    'the same release: not written again',
  );
  await rememberClusterRelease(dir, { version: '4.15.2' });
  t.match(await rememberedClusterRelease(dir), { version: '4.15.2' }, 'a newer one replaces it');
  await rememberClusterRelease(dir, { version: '4.15.3\nevent=forged' });
  t.match(
    await rememberedClusterRelease(dir),
    { version: '4.15.2' },
    'a version of another shape is not remembered',
  );
});

t.test('a damaged or foreign file counts as none', async (t) => {
  const dir = await tmpdir(t, 'ob-remembered-bad-');
  const file = join(dir, CLUSTER_RELEASE_FILE);
  for (const [what, content] of [
    ['not JSON', '{"version": "4.15'],
    ['an array', '["4.15.1"]'],
    ['no seenAt', '{"version":"4.15.1"}'],
    ['a version with a newline', '{"version":"4.15.1\\nx","seenAt":"2026-11-01T00:00:00Z"}'],
    [
      'an image not by digest',
      `{"version":"4.15.1","image":"quay.io/x:latest","seenAt":"2026-11-01T00:00:00Z"}`,
    ],
    [
      'over the state-file bound',
      `{"version":"4.15.1","seenAt":"2026-11-01T00:00:00Z","pad":"${'x'.repeat(5 * 1024 * 1024)}"}`,
    ],
  ] as const) {
    await writeFile(file, content);
    t.equal(await rememberedClusterRelease(dir), undefined, what);
  }
});

t.test(
  'a release whose image is by tag: the version is remembered, the image is not',
  async (t) => {
    const dir = await tmpdir(t, 'ob-remembered-tag-');
    await rememberClusterRelease(dir, { version: '4.15.1', image: IMAGE });
    await rememberClusterRelease(dir, {
      version: '4.16.0',
      image: 'quay.io/openshift-release-dev/ocp-release:4.16.0',
    });
    const r = await rememberedClusterRelease(dir);
    t.equal(r?.version, '4.16.0', 'a stale file would let a downgrade to 4.15.x through');
    t.equal(r?.image, undefined);
  },
);
