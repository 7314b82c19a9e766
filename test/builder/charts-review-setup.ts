// Shared set-up of the Helm chart review tests (charts-names.test.ts: how a chart is named and
// told from an image; charts-bundle.test.ts: diff -f, the image-store estimate, the catalog
// warning), split so each file stays short on a loaded machine: one registry, an image, two charts.
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';
import { startRegistry } from '../helpers/registry.mjs';
import { pushChart, pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, keygen } from './lib.js';

export const reg = await startRegistry();
t.teardown(() => reg.stop());
export const work = await tmpdir(t, 'ob-charts-review-');
export const keys = await keygen(work);
export const H = reg.host;
export const cache = path.join(work, 'cache');

export const app = await pushImage(
  { tag: 'v1', platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'app/v': '1' }] }] },
  `${H}/team/app:v1`,
);
export const demo = await pushChart({ name: 'demo', version: '0.1.0' }, `${H}/charts/demo:0.1.0`);
// helm push stores version 0.1.0+build under the tag 0.1.0_build (a tag has no "+")
export const build = await pushChart(
  { name: 'demo', version: '0.2.0' },
  `${H}/charts/demo:0.2.0_build`,
);

let n = 0;
/** A fresh directory with FILE (YAML of doc) in it, and `bundle ARGS` run there ("FILE" in args is its path). */
export async function inDir(doc: object | undefined, args: string[]) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, 'bundle.yaml');
  if (doc) await writeFile(file, stringify(doc));
  const r = await bundle(
    args.map((a) => (a === 'FILE' ? file : a)),
    { cwd: dir },
  );
  return { ...r, dir, file, output: path.join(dir, 'o.bundle') };
}
export const create = (doc: object | undefined, args: string[]) =>
  inDir(doc, [
    'create',
    '--quiet',
    '--tls-verify=false',
    '--cache',
    cache,
    ...(doc ? ['-f', 'FILE'] : []),
    ...args,
  ]);
export const dryRun = async (args: string[]) => {
  const r = await create(undefined, ['--dry-run', '--json', '--version', '1.0', ...args]);
  return {
    ...r,
    plan:
      r.code === 0
        ? (JSON.parse(r.stdout) as {
            charts: { reference: string; digest: string }[];
            warnings?: { kind: string; object: string; message: string }[];
          })
        : undefined,
  };
};
export const own = (fields: object) => ({
  apiVersion: 'offline-bundle/v1alpha1',
  kind: 'Bundle',
  ...fields,
});
export const isc = (url: string) => ({
  apiVersion: 'mirror.openshift.io/v2alpha1',
  kind: 'ImageSetConfiguration',
  mirror: {
    additionalImages: [{ name: app.ref }],
    helm: { repositories: [{ name: 'local', url, charts: [{ name: 'demo', version: '0.1.0' }] }] },
  },
});
export const lineCount = (stderr: string) => stderr.trimEnd().split('\n').length;
