// Generates an OpenShift-shaped release (shape.mjs) as real gzip layers and pushes it into a
// docker-registry: payload images under openshift-release-dev/ocp-v4.0-art-dev (tagged by
// component), the release image under openshift-release-dev/ocp-release, whose
// release-manifests/image-references lists every payload image by digest as
// quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:..., the way a real payload does.
// A registries.conf sends quay.io/openshift-release-dev to the local registry (as the demo).
import { randomBytes } from 'node:crypto';
import { rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { buildLayer, releaseFiles, writeImageLayout } from '../../test/helpers/images.mjs';
import { skopeoCopy } from '../../test/helpers/registry.mjs';

export const VERSION = '4.16.0';
export const PREVIOUS = '4.15.9';
export const UPSTREAM = 'quay.io/openshift-release-dev';
const PAYLOAD_REPO = 'openshift-release-dev/ocp-v4.0-art-dev';
const RELEASE_REPO = 'openshift-release-dev/ocp-release';
const RELEASE_TAG = `${VERSION}-x86_64`;

/**
 * gzip level of the generated layers: random data does not shrink, so storing it gives the
 * same bytes to zstd as a real gzip layer, at a fraction of the generator's time.
 */
const GZIP_LEVEL = 0;

/** Random bytes (what a gzip layer of binaries looks like to zstd) plus a little text. */
function layerFiles(key, bytes) {
  return {
    [`usr/share/${key}/data.bin`]: randomBytes(bytes),
    [`etc/${key}.release`]: `${key} ${bytes}\n`,
  };
}

/**
 * @param {{ host: string }} reg a started docker-registry
 * @param {ReturnType<import('./shape.mjs').releaseShape>} shape
 * @param {string} dir scratch directory (the generated layout is removed once pushed)
 * @param {(msg: string) => void} say
 * @returns {Promise<{ release: string, conf: string, payload: { name: string, ref: string, source: string }[],
 *   blobs: Map<string, { repo: string, size: number }>, bytes: number }>}
 *   release: the release image as the builder names it; payload[].ref: the upstream digest
 *   reference, .source: the same image in the local registry; blobs: every config and layer
 *   and a repository the registry serves it under (manifests come by /manifests/)
 */
export async function generateRelease(reg, shape, dir, say) {
  const layout = path.join(dir, 'layout');
  const shared = {};
  for (const [key, bytes] of Object.entries(shape.shared))
    shared[key] = await buildLayer(layerFiles(key, bytes), { level: GZIP_LEVEL });
  /** @type {Map<string, string>} digest -> repository */
  const repos = new Map();
  /** @type {Map<string, number>} layer digest -> size (own layers leave the disk once pushed) */
  const sizes = new Map();
  const payload = [];
  let done = 0;
  for (const im of shape.images) {
    const layers = [];
    for (const [i, l] of im.layers.entries())
      layers.push(
        'shared' in l
          ? shared[l.shared]
          : await buildLayer(layerFiles(`${im.name}-${i}`, l.own), { level: GZIP_LEVEL }),
      );
    const info = await writeImageLayout(layout, {
      tag: im.name,
      index: false,
      platforms: [{ os: 'linux', architecture: 'amd64', layers }],
    });
    await skopeoCopy(
      `oci:${layout}:${im.name}`,
      `docker://${reg.host}/${PAYLOAD_REPO}:${im.name}`,
      ['--preserve-digests'],
    );
    // the image's own layers are no longer needed on disk once pushed
    for (const l of layers) sizes.set(l.digest, l.size);
    for (const l of layers)
      if (!Object.values(shared).includes(l))
        await rm(path.join(layout, 'blobs/sha256', l.digest.slice(7)));
    for (const d of [info.manifests[0].config, ...info.manifests[0].layers])
      repos.set(d, PAYLOAD_REPO);
    payload.push({
      name: im.name,
      ref: `${UPSTREAM}/ocp-v4.0-art-dev@${info.digest}`,
      source: `${reg.host}/${PAYLOAD_REPO}@${info.digest}`,
    });
    if (++done % 10 === 0) say(`  ${done}/${shape.images.length} images pushed`);
  }
  const references = releaseFiles({
    version: VERSION,
    previous: [PREVIOUS],
    images: Object.fromEntries(payload.map((p) => [p.name, p.ref])),
  });
  const info = await writeImageLayout(layout, {
    tag: RELEASE_TAG,
    index: false,
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [shared['base-rhel9'], references] }],
  });
  await skopeoCopy(
    `oci:${layout}:${RELEASE_TAG}`,
    `docker://${reg.host}/${RELEASE_REPO}:${RELEASE_TAG}`,
    ['--preserve-digests'],
  );
  for (const d of [info.manifests[0].config, ...info.manifests[0].layers])
    if (!repos.has(d)) repos.set(d, RELEASE_REPO);
  payload.push({
    name: 'release',
    ref: `${UPSTREAM}/ocp-release@${info.digest}`,
    source: `${reg.host}/${RELEASE_REPO}@${info.digest}`,
  });

  /** @type {Map<string, { repo: string, size: number }>} */
  const blobs = new Map();
  const sizeOf = async (d) =>
    (await stat(path.join(layout, 'blobs/sha256', d.slice(7))).catch(() => undefined))?.size;
  for (const l of Object.values(shared)) sizes.set(l.digest, l.size);
  for (const [d, repo] of repos)
    blobs.set(d, { repo, size: sizes.get(d) ?? (await sizeOf(d)) ?? -1 });
  await rm(layout, { recursive: true, force: true });

  const conf = path.join(dir, 'mirror.conf');
  await writeFile(
    conf,
    `[[registry]]\nprefix = "${UPSTREAM}"\nlocation = "${UPSTREAM}"\n[[registry.mirror]]\nlocation = "${reg.host}/openshift-release-dev"\ninsecure = true\n`,
  );
  return {
    release: `${UPSTREAM}/ocp-release:${RELEASE_TAG}`,
    conf,
    payload,
    blobs,
    bytes: shape.bytes,
  };
}
