// The agent image, written as an OCI archive without a container runtime or registry: one image
// per architecture (amd64, arm64), both under one image index tagged VERSION, so one file serves
// every node as a registry's multi-arch tag would (`skopeo copy --all` pushes both; podman,
// skopeo and `bundle create --image oci-archive:` pick the platform they need). Each image:
//
//   layer 1 (base): files of Debian packages (dpkg-deb -x of the .debs package-inputs.mjs caches,
//           pinned by scripts/base-debs.lock.json; never fetched here): the C and C++ runtime
//           Node.js and the zstd addon link against, CA certificates, dash for /bin/sh
//           (the launcher), and nsenter (to run `systemctl reload crio` in the host's
//           namespaces from a privileged container); plus /etc/passwd, /etc/group, /tmp.
//   layer 2 (app):  the agent tarball's prefix under /usr/local.
//
// Every file time is SOURCE_DATE_EPOCH, tar entries are sorted with owner 0:0, gzip carries no
// name or time, and the config's `created` is the same epoch: the same inputs (the same .deb
// versions, recorded in the image's annotations) give the same bytes and digests.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { BASE_DEBS, fileDigest, inputsFor, verifiedCopies } from './package-inputs.mjs';
import { reproducibleTar, shq } from './reproducible-tar.mjs';

/** The base .debs of `arch`: copies in `work` of the cached bytes checked against their pins, name → { file, version }. */
function cachedDebs(arch, work) {
  const items = inputsFor({ arches: [arch], runtimes: false });
  const copies = verifiedCopies(items, path.join(work, `debs-${arch}`));
  return new Map(items.map((i) => [i.name, { file: copies.get(i.file), version: i.version }]));
}

/** Writes a blob into the layout; returns its descriptor. */
function blob(layout, mediaType, data, annotations) {
  const digest = createHash('sha256').update(data).digest('hex');
  writeFileSync(path.join(layout, 'blobs', 'sha256', digest), data);
  return {
    mediaType,
    digest: `sha256:${digest}`,
    size: data.length,
    ...(annotations ? { annotations } : {}),
  };
}

function layer(layout, dir, names, epoch, work) {
  const tarFile = path.join(work, `${path.basename(dir)}.tar`);
  reproducibleTar(dir, names, tarFile, epoch, { gzip: false });
  const diffId = `sha256:${fileDigest(tarFile, 'sha256')}`;
  execFileSync('sh', ['-c', `gzip -9n < ${shq(tarFile)} > ${shq(tarFile)}.gz`]);
  const gz = readFileSync(`${tarFile}.gz`);
  rmSync(tarFile);
  rmSync(`${tarFile}.gz`);
  return { desc: blob(layout, 'application/vnd.oci.image.layer.v1.tar+gzip', gz), diffId };
}

function baseRootfs(dir, debs) {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const x = path.join(dir, '..', '.deb-x');
  for (const spec of BASE_DEBS) {
    const { file } = debs.get(spec.name);
    rmSync(x, { recursive: true, force: true });
    mkdirSync(x);
    execFileSync('dpkg-deb', ['-x', file, x]);
    const keep = spec.keep ?? [''];
    // Copyright files stay with what they cover; manuals, docs and locales go.
    const parts = [...keep, `usr/share/doc/${spec.name}/copyright`].filter(
      (k) => k === '' || existsSync(path.join(x, k)),
    );
    for (const k of parts) {
      execFileSync('sh', [
        '-c',
        `cd ${shq(x)} && tar -cf - ${k === '' ? '.' : shq(k)} | tar -xf - -C ${shq(dir)}`,
      ]);
    }
  }
  rmSync(x, { recursive: true, force: true });
  for (const d of [
    'usr/share/man',
    'usr/share/info',
    'usr/share/locale',
    'usr/share/lintian',
    'usr/lib/x86_64-linux-gnu/gconv',
    'usr/lib/aarch64-linux-gnu/gconv',
    'usr/share/gcc',
    'usr/share/gdb',
  ]) {
    rmSync(path.join(dir, d), { recursive: true, force: true });
  }
  for (const doc of readdirSync(path.join(dir, 'usr/share/doc'), { withFileTypes: true })) {
    const d = path.join(dir, 'usr/share/doc', doc.name);
    if (!doc.isDirectory()) continue; // a link to another package's docs
    for (const f of readdirSync(d))
      if (f !== 'copyright') rmSync(path.join(d, f), { recursive: true, force: true });
  }
  // /bin/sh, the CA bundle as update-ca-certificates would write it, users, /tmp.
  mkdirSync(path.join(dir, 'bin'), { recursive: true });
  if (!existsSync(path.join(dir, 'bin/sh'))) symlinkSync('dash', path.join(dir, 'bin/sh'));
  const certs = [];
  const caDir = path.join(dir, 'usr/share/ca-certificates');
  for (const sub of readdirSync(caDir).sort()) {
    for (const f of readdirSync(path.join(caDir, sub)).sort())
      if (f.endsWith('.crt')) certs.push(readFileSync(path.join(caDir, sub, f), 'utf8').trim());
  }
  mkdirSync(path.join(dir, 'etc/ssl/certs'), { recursive: true });
  writeFileSync(path.join(dir, 'etc/ssl/certs/ca-certificates.crt'), `${certs.join('\n')}\n`);
  writeFileSync(
    path.join(dir, 'etc/passwd'),
    'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
  );
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nnogroup:x:65534:\n');
  writeFileSync(
    path.join(dir, 'etc/nsswitch.conf'),
    'passwd: files\ngroup: files\nhosts: files dns\n',
  );
  for (const d of [
    'tmp',
    'root',
    'proc',
    'sys',
    'dev',
    'run',
    'var/lib/bundle-agent',
    'etc/bundle-agent',
  ])
    mkdirSync(path.join(dir, d), { recursive: true });
  chmodSync(dir, 0o755);
  chmodSync(path.join(dir, 'tmp'), 0o1777);
}

/** One architecture's image (layers, config, manifest) into `layout`; returns the manifest's descriptor. */
function buildImage(layout, work, prefixDir, arch, version, epoch) {
  const debs = cachedDebs(arch, work);
  const base = path.join(work, `base-${arch}`);
  baseRootfs(base, debs);
  const l1 = layer(layout, base, readdirSync(base).sort(), epoch, work);
  rmSync(base, { recursive: true, force: true });

  const app = path.join(work, `app-${arch}`);
  mkdirSync(path.join(app, 'usr'), { recursive: true });
  execFileSync('cp', ['-a', prefixDir, path.join(app, 'usr', 'local')]);
  rmSync(path.join(app, 'usr/local/install.sh'));
  const l2 = layer(layout, app, ['usr'], epoch, work);
  rmSync(app, { recursive: true, force: true });

  const created = new Date(epoch * 1000).toISOString().replace(/\.000Z$/, 'Z');
  const debList = [...debs].map(([n, d]) => `${n}=${d.version}`).join(' ');
  const config = {
    created,
    architecture: arch,
    os: 'linux',
    config: {
      Entrypoint: ['/usr/local/bin/bundle-agent'],
      Cmd: ['run', '--config', '/etc/bundle-agent/config.yaml'],
      Env: [
        'PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin',
        'SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt',
      ],
      WorkingDir: '/',
      Labels: {
        'org.opencontainers.image.title': 'bundle-agent',
        'org.opencontainers.image.version': version,
        'org.opencontainers.image.description':
          "offline-bundle agent: loads signed update bundles from USB media into the node's container runtime",
      },
    },
    rootfs: { type: 'layers', diff_ids: [l1.diffId, l2.diffId] },
    history: [
      { created, created_by: `offline-bundle scripts/oci-image.mjs: Debian packages ${debList}` },
      {
        created,
        created_by: `offline-bundle scripts/package.mjs: bundle-agent ${version} under /usr/local`,
      },
    ],
  };
  const cfg = blob(
    layout,
    'application/vnd.oci.image.config.v1+json',
    Buffer.from(JSON.stringify(config)),
  );
  const manifest = {
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config: cfg,
    layers: [l1.desc, l2.desc],
    annotations: {
      'org.opencontainers.image.created': created,
      'org.opencontainers.image.version': version,
      'io.offline-bundle.base.debs': debList,
    },
  };
  const desc = blob(
    layout,
    'application/vnd.oci.image.manifest.v1+json',
    Buffer.from(JSON.stringify(manifest)),
  );
  return { ...desc, platform: { architecture: arch, os: 'linux' } };
}

/**
 * Builds `OUT/bundle-agent-VERSION.oci.tar` from the staged agent prefixes (architecture →
 * directory). index.json names the image index VERSION (multi-arch: `oci-archive:FILE:VERSION`)
 * and each image VERSION-ARCH (`oci-archive:FILE:VERSION-arm64`, `umoci unpack --image
 * DIR:VERSION-arm64`). Returns the archive's path.
 * @param {{ prefixDirs: Record<string, string>, version: string, epoch: number, out: string, stage: string }} o
 */
export async function buildAgentImage(o) {
  const work = path.join(o.stage, 'oci');
  rmSync(work, { recursive: true, force: true });
  const layout = path.join(work, 'layout');
  mkdirSync(path.join(layout, 'blobs', 'sha256'), { recursive: true });
  const manifests = Object.keys(o.prefixDirs)
    .sort()
    .map((arch) => buildImage(layout, work, o.prefixDirs[arch], arch, o.version, o.epoch));
  const created = new Date(o.epoch * 1000).toISOString().replace(/\.000Z$/, 'Z');
  const index = {
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.index.v1+json',
    manifests,
    annotations: {
      'org.opencontainers.image.created': created,
      'org.opencontainers.image.version': o.version,
    },
  };
  const idesc = blob(
    layout,
    'application/vnd.oci.image.index.v1+json',
    Buffer.from(JSON.stringify(index)),
    { 'org.opencontainers.image.ref.name': o.version },
  );
  // VERSION-ARCH name each image alone: umoci 0.4 finds two manifests under VERSION ("tag is
  // ambiguous") and has no platform choice.
  const single = manifests.map((m) => ({
    ...m,
    annotations: { 'org.opencontainers.image.ref.name': `${o.version}-${m.platform.architecture}` },
  }));
  writeFileSync(
    path.join(layout, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [idesc, ...single],
    }),
  );
  writeFileSync(path.join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  for (const f of readdirSync(path.join(layout, 'blobs', 'sha256')))
    chmodSync(path.join(layout, 'blobs', 'sha256', f), 0o644);
  const file = path.join(o.out, `bundle-agent-${o.version}.oci.tar`);
  reproducibleTar(layout, ['blobs', 'index.json', 'oci-layout'], file, o.epoch, { gzip: false });
  rmSync(work, { recursive: true, force: true });
  return file;
}
