// Real, deterministic OCI images generated offline: layers are gzip'd tars
// built with tar-stream, written as an OCI image layout
// (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
// and optionally pushed to a registry with skopeo.
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { skopeoCopy, skopeoInspectRaw, sha256 } from './registry.mjs';

export const MT_LAYER_GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip';
export const MT_CONFIG = 'application/vnd.oci.image.config.v1+json';
export const MT_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const MT_INDEX = 'application/vnd.oci.image.index.v1+json';
export const REF_NAME_ANNOTATION = 'org.opencontainers.image.ref.name';

/**
 * @typedef {Record<string, string|Buffer>} LayerFiles  path in layer -> content
 * @typedef {{ gz: Buffer, digest: string, size: number, diffID: string, mediaType: string }} Layer
 * @typedef {{ os: string, architecture: string, variant?: string }} Platform
 * @typedef {{ Env?: string[], Cmd?: string[], Entrypoint?: string[], Labels?: Record<string,string>, WorkingDir?: string, User?: string }} ImageConfig
 * @typedef {Platform & { layers: (LayerFiles|Layer)[], config?: ImageConfig }} PlatformSpec
 * @typedef {{ tag: string, platforms: PlatformSpec[], index?: boolean }} ImageSpec
 * @typedef {{ digest: string, platform: Platform, layers: string[], config: string, size: number }} ManifestInfo
 * @typedef {{ digest: string, mediaType: string, size: number, raw: Buffer, manifests: ManifestInfo[] }} ImageInfo
 */

/** @type {Promise<any>|undefined} */
let tarStreamP;
/**
 * tar-stream is a dependency of the workspace packages, not (necessarily) of
 * the root package, so fall back to resolving it from one of them.
 * @returns {Promise<any>}
 */
function tarStream() {
  tarStreamP ??= (async () => {
    try {
      return await import('tar-stream');
    } catch {
      const root = new URL('../../', import.meta.url);
      for (const pkg of [
        'packages/oci/package.json',
        'packages/format/package.json',
        'builder/package.json',
      ]) {
        try {
          return createRequire(new URL(pkg, root))('tar-stream');
        } catch {
          // try the next one
        }
      }
      throw new Error(
        'tar-stream is not resolvable from test/helpers (add it to the root devDependencies)',
      );
    }
  })().then((m) => m.default ?? m);
  return tarStreamP;
}

/** @param {string} p */
function normalizeEntry(p) {
  const n = path.posix.normalize(p.replace(/^(\.\/|\/)+/, ''));
  if (!n || n === '.' || n.startsWith('../'))
    throw new Error(`invalid layer path ${JSON.stringify(p)}`);
  return n.replace(/\/+$/, '');
}

/**
 * Build one deterministic gzip'd tar layer. Entries are sorted, every parent
 * directory gets its own entry, mtime is 0, uid/gid 0, modes 0755/0644.
 *
 * @param {LayerFiles} files
 * @param {{ level?: number }} [opts] gzip level (default 6); 0 stores, for gigabytes of
 *   random data whose gzip could not shrink them anyway (the benchmark's generator)
 * @returns {Promise<Layer>}
 */
export async function buildLayer(files, opts = {}) {
  const tar = await tarStream();
  /** @type {Map<string, Buffer|null>} name -> content (null = directory) */
  const entries = new Map();
  for (const [p, content] of Object.entries(files)) {
    const name = normalizeEntry(p);
    const parts = name.split('/');
    for (let i = 1; i < parts.length; i++) {
      const d = parts.slice(0, i).join('/') + '/';
      if (!entries.has(d)) entries.set(d, null);
    }
    entries.set(name, Buffer.isBuffer(content) ? content : Buffer.from(String(content), 'utf8'));
  }
  const names = [...entries.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));

  const pack = tar.pack();
  const mtime = new Date(0);
  /** @type {Buffer[]} */
  const chunks = [];
  const done = (async () => {
    for await (const c of pack) chunks.push(Buffer.from(c));
  })();
  for (const name of names) {
    const content = entries.get(name);
    const common = { name, mtime, uid: 0, gid: 0, uname: '', gname: '' };
    await new Promise((resolve, reject) => {
      const cb = (/** @type {Error|null|undefined} */ err) =>
        err ? reject(err) : resolve(undefined);
      if (content == null) pack.entry({ ...common, type: 'directory', mode: 0o755 }, cb);
      else pack.entry({ ...common, type: 'file', mode: 0o644, size: content.length }, content, cb);
    });
  }
  pack.finalize();
  await done;
  const tarBuf = Buffer.concat(chunks);
  const gz = gzipSync(tarBuf, { level: opts.level ?? 6 });
  return {
    gz,
    digest: sha256(gz),
    size: gz.length,
    diffID: sha256(tarBuf),
    mediaType: MT_LAYER_GZIP,
  };
}

/**
 * @param {string} dir layout root
 * @param {Buffer} buf
 * @returns {Promise<string>} digest
 */
async function writeBlob(dir, buf) {
  const digest = sha256(buf);
  const file = path.join(dir, 'blobs', 'sha256', digest.slice('sha256:'.length));
  // content-addressed: a blob already there (a layer shared by several images) is the same bytes
  if ((await stat(file).catch(() => undefined))?.size !== buf.length) await writeFile(file, buf);
  return digest;
}

/**
 * Whether a layer spec is a layer already built by buildLayer (reused as is: the benchmark
 * shares one large base layer between many images) rather than files to pack.
 * @param {LayerFiles|Layer} l
 * @returns {l is Layer}
 */
const isBuiltLayer = (l) => Buffer.isBuffer(l.gz) && typeof l.diffID === 'string';

/** @param {unknown} v */
const json = (v) => Buffer.from(JSON.stringify(v), 'utf8');

/**
 * Create (or extend) an OCI image layout at `dir` with one tagged image. A layer is either
 * the files to pack or a Layer from buildLayer.
 * One platform -> an image manifest (unless spec.index === true); several
 * platforms -> an image index whose entries carry `platform`. The layout's
 * index.json gets an entry annotated org.opencontainers.image.ref.name=tag,
 * replacing any previous entry with the same tag.
 *
 * @param {string} dir
 * @param {ImageSpec} spec
 * @returns {Promise<ImageInfo>}
 */
export async function writeImageLayout(dir, spec) {
  if (!spec.tag) throw new Error('writeImageLayout: spec.tag is required');
  if (!spec.platforms?.length)
    throw new Error('writeImageLayout: spec.platforms must not be empty');
  await mkdir(path.join(dir, 'blobs', 'sha256'), { recursive: true });
  await writeFile(path.join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));

  /** @type {{ info: ManifestInfo, raw: Buffer }[]} */
  const images = [];
  for (const p of spec.platforms) {
    const layers = [];
    for (const files of p.layers) {
      const layer = isBuiltLayer(files) ? files : await buildLayer(files);
      await writeBlob(dir, layer.gz);
      layers.push(layer);
    }
    /** @type {Platform} */
    const platform = { architecture: p.architecture, os: p.os };
    if (p.variant) platform.variant = p.variant;
    const config = json({
      created: '1970-01-01T00:00:00Z',
      architecture: p.architecture,
      os: p.os,
      ...(p.variant ? { variant: p.variant } : {}),
      config: p.config ?? {},
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffID) },
    });
    const configDigest = await writeBlob(dir, config);
    const manifest = json({
      schemaVersion: 2,
      mediaType: MT_MANIFEST,
      config: { mediaType: MT_CONFIG, digest: configDigest, size: config.length },
      layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.size })),
    });
    const digest = await writeBlob(dir, manifest);
    images.push({
      raw: manifest,
      info: {
        digest,
        size: manifest.length,
        platform,
        layers: layers.map((l) => l.digest),
        config: configDigest,
      },
    });
  }

  const useIndex = spec.index ?? images.length > 1;
  if (!useIndex && images.length > 1)
    throw new Error('writeImageLayout: index: false needs exactly one platform');
  let top;
  let mediaType;
  if (useIndex) {
    mediaType = MT_INDEX;
    top = json({
      schemaVersion: 2,
      mediaType: MT_INDEX,
      manifests: images.map(({ info }) => ({
        mediaType: MT_MANIFEST,
        digest: info.digest,
        size: info.size,
        platform: info.platform,
      })),
    });
    await writeBlob(dir, top);
  } else {
    mediaType = MT_MANIFEST;
    top = images[0].raw;
  }
  const digest = sha256(top);

  const indexPath = path.join(dir, 'index.json');
  /** @type {{ schemaVersion: number, mediaType?: string, manifests: any[] }} */
  let layoutIndex = { schemaVersion: 2, mediaType: MT_INDEX, manifests: [] };
  try {
    layoutIndex = JSON.parse(await readFile(indexPath, 'utf8'));
    layoutIndex.manifests ??= [];
  } catch (e) {
    if (/** @type {NodeJS.ErrnoException} */ (e).code !== 'ENOENT') throw e;
  }
  layoutIndex.manifests = layoutIndex.manifests.filter(
    (m) => m?.annotations?.[REF_NAME_ANNOTATION] !== spec.tag,
  );
  layoutIndex.manifests.push({
    mediaType,
    digest,
    size: top.length,
    annotations: { [REF_NAME_ANNOTATION]: spec.tag },
  });
  await writeFile(indexPath, JSON.stringify(layoutIndex));

  return { digest, mediaType, size: top.length, raw: top, manifests: images.map((i) => i.info) };
}

/**
 * Strip the tag (and any digest) from a docker reference.
 * '127.0.0.1:5000/a/b:v1' -> '127.0.0.1:5000/a/b'
 * @param {string} ref
 */
export function repoOf(ref) {
  let r = ref.replace(/^docker:\/\//, '');
  const at = r.indexOf('@');
  if (at >= 0) r = r.slice(0, at);
  const slash = r.lastIndexOf('/');
  const colon = r.lastIndexOf(':');
  if (colon > slash) r = r.slice(0, colon);
  return r;
}

/**
 * Write `spec` as an OCI layout in a temp dir and push it with skopeo
 * (--all --preserve-digests) to `dest` ('host:port/repo:tag', docker://
 * optional). Verifies that the registry serves exactly the local manifest
 * bytes (same digest) and throws otherwise.
 *
 * @param {ImageSpec} spec
 * @param {string} dest
 * @param {{ creds?: string, certDir?: string }} [opts] creds: 'user:password' for the registry;
 *   certDir: skopeo's --cert-dir (a client certificate for a registry that requires one)
 * @returns {Promise<ImageInfo & { ref: string, digestRef: string }>}
 */
export async function pushImage(spec, dest, opts = {}) {
  const ref = dest.replace(/^docker:\/\//, '');
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ob-image-'));
  try {
    const info = await writeImageLayout(dir, spec);
    const args = ['--all', '--preserve-digests'];
    if (opts.creds) args.push('--dest-creds', opts.creds);
    if (opts.certDir) args.push('--dest-cert-dir', opts.certDir);
    await skopeoCopy(`oci:${dir}:${spec.tag}`, `docker://${ref}`, args);
    const remote = await skopeoInspectRaw(`docker://${ref}`, [
      ...(opts.creds ? ['--creds', opts.creds] : []),
      ...(opts.certDir ? ['--cert-dir', opts.certDir] : []),
    ]);
    if (sha256(remote) !== info.digest) {
      throw new Error(
        `pushImage: registry serves ${sha256(remote)} for ${ref}, expected ${info.digest}`,
      );
    }
    return { ...info, ref, digestRef: `${repoOf(ref)}@${info.digest}` };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Files of an OpenShift release payload layer: release-manifests/image-references
 * (an ImageStream listing component images) and release-manifests/release-metadata
 * (cincinnati metadata), as found in quay.io/openshift-release-dev/ocp-release.
 *
 * @param {{ version: string, previous?: string[], images: Record<string, string>, manifests?: Record<string, string|Buffer> }} o
 *   images: component name -> pullspec (normally 'registry/repo@sha256:...');
 *   manifests: extra files put under release-manifests/ (e.g. '0000_50_x.yaml').
 * @returns {LayerFiles}
 */
export function releaseFiles({ version, previous = [], images, manifests = {} }) {
  const imageStream = {
    kind: 'ImageStream',
    apiVersion: 'image.openshift.io/v1',
    metadata: { name: version, creationTimestamp: null },
    spec: {
      lookupPolicy: { local: false },
      tags: Object.keys(images)
        .sort()
        .map((name) => ({ name, from: { kind: 'DockerImage', name: images[name] } })),
    },
  };
  const metadata = { kind: 'cincinnati-metadata-v0', version, previous, metadata: {} };
  /** @type {LayerFiles} */
  const files = {
    'release-manifests/image-references': JSON.stringify(imageStream, null, 2) + '\n',
    'release-manifests/release-metadata': JSON.stringify(metadata, null, 2) + '\n',
  };
  for (const [name, content] of Object.entries(manifests))
    files[`release-manifests/${name}`] = content;
  return files;
}

export const MT_HELM_CONFIG = 'application/vnd.cncf.helm.config.v1+json';
export const MT_HELM_CHART = 'application/vnd.cncf.helm.chart.content.v1.tar+gzip';
export const MT_HELM_PROVENANCE = 'application/vnd.cncf.helm.chart.provenance.v1.prov';

/**
 * Push a tiny Helm chart as helm push stores it (helm is not installed here): an OCI manifest
 * whose config is Chart.yaml's fields as JSON (Helm's config media type), one layer the chart's
 * NAME-VERSION.tgz (NAME/Chart.yaml, NAME/values.yaml), and with `provenance` a .prov layer.
 * `configMediaType` / `extraLayer` make artifacts that are not charts, for refusals.
 *
 * @param {{ name: string, version: string, provenance?: string, configMediaType?: string, extraLayer?: string }} spec
 * @param {string} dest 'host:port/repo/NAME:VERSION'
 * @returns {Promise<{ digest: string, ref: string, digestRef: string, blobs: string[] }>}
 */
export async function pushChart(spec, dest) {
  const ref = dest.replace(/^(docker|oci):\/\//, '');
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ob-chart-'));
  try {
    await mkdir(path.join(dir, 'blobs', 'sha256'), { recursive: true });
    await writeFile(path.join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    const chart = await buildLayer({
      [`${spec.name}/Chart.yaml`]: `apiVersion: v2\nname: ${spec.name}\nversion: ${spec.version}\n`,
      [`${spec.name}/values.yaml`]: 'replicas: 1\n',
    });
    const config = json({ apiVersion: 'v2', name: spec.name, version: spec.version });
    const layers = [{ mediaType: MT_HELM_CHART, buf: chart.gz }];
    if (spec.provenance)
      layers.push({ mediaType: MT_HELM_PROVENANCE, buf: Buffer.from(spec.provenance) });
    if (spec.extraLayer)
      layers.push({ mediaType: spec.extraLayer, buf: Buffer.from('not a chart') });
    const configDigest = await writeBlob(dir, config);
    const descs = [];
    for (const l of layers)
      descs.push({
        mediaType: l.mediaType,
        digest: await writeBlob(dir, l.buf),
        size: l.buf.length,
      });
    const manifest = json({
      schemaVersion: 2,
      mediaType: MT_MANIFEST,
      config: {
        mediaType: spec.configMediaType ?? MT_HELM_CONFIG,
        digest: configDigest,
        size: config.length,
      },
      layers: descs,
    });
    const digest = await writeBlob(dir, manifest);
    await writeFile(
      path.join(dir, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MT_INDEX,
        manifests: [
          {
            mediaType: MT_MANIFEST,
            digest,
            size: manifest.length,
            annotations: { [REF_NAME_ANNOTATION]: spec.version },
          },
        ],
      }),
    );
    await skopeoCopy(`oci:${dir}:${spec.version}`, `docker://${ref}`, ['--preserve-digests']);
    return {
      digest,
      ref,
      digestRef: `${repoOf(ref)}@${digest}`,
      blobs: [digest, configDigest, ...descs.map((d) => d.digest)],
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
