// tier: unit
// bundle.json's charts (Helm charts served by the node, never pulled): held to images[]'s shape,
// each manifest among the blobs; absent when empty. A reader that predates the field ignores it
// (the frozen 0.1.0 reader: test/builder/charts.test.ts), so it needs no format version.
import t from 'tap';
import { FormatError, validateManifest } from '@offline-bundle/format';
import { makeBundle } from './craft.js';

t.test('charts: validated like images, each manifest among the blobs', async (t) => {
  const made = await makeBundle(t);
  const m = made.written.manifest;
  t.notOk('charts' in m, 'absent when the writer was given none');
  const blob = m.blobs.find((b) => !m.images.some((im) => im.digest === b.digest))!;
  const chart = {
    repository: 'registry.example.com/charts/demo',
    tag: '0.1.0',
    digest: blob.digest,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    platforms: [],
  };
  t.same(
    validateManifest({ ...m, charts: [chart] }).charts,
    [chart],
    'a chart whose manifest is a listed blob',
  );
  const refused = (charts: unknown, re: RegExp, what: string) => {
    try {
      validateManifest({ ...m, charts });
      t.fail(`${what}: accepted`);
    } catch (err) {
      t.ok(err instanceof FormatError, `${what}: a FormatError`);
      t.match((err as Error).message, re, what);
    }
  };
  refused(
    [{ ...chart, digest: `sha256:${'f'.repeat(64)}` }],
    /charts\[0\]\.digest sha256:f+ is not among the blobs/,
    'a chart the bundle does not carry',
  );
  refused(
    [{ ...chart, repository: '' }],
    /charts\[0\]\.repository must be a non-empty string/,
    'a chart without a name',
  );
  refused({ not: 'a list' }, /charts must be a list/, 'not a list');
  refused([{ ...chart, tag: 'x'.repeat(129) }], /charts\[0\]\.tag/, 'a tag over 128 characters');
  // a chart never stands in for an image the runtime pulls: not its manifest, not its name, not an index
  const image = m.images[0]!;
  refused(
    [{ ...chart, digest: image.digest }],
    /charts\[0\]\.digest sha256:[0-9a-f]+ is an image's manifest/,
    "an image's manifest listed as a chart",
  );
  refused(
    [{ ...chart, repository: image.repository, tag: image.tag }],
    /charts\[0\] is named .* an image's name/,
    "a chart under an image's name",
  );
  refused(
    [{ ...chart, mediaType: 'application/vnd.oci.image.index.v1+json' }],
    /charts\[0\]\.mediaType must be an image manifest's/,
    'an index as a chart',
  );
  refused(
    [{ ...chart, platforms: [{ os: 'linux', architecture: 'amd64' }] }],
    /charts\[0\]\.platforms must be empty/,
    'a chart with a platform',
  );
});
