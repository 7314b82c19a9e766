// scripts/screenshots.mjs, the factory: an OpenShift-shaped release in a throw-away registry
// (as scripts/demo.mjs makes it) and `bundle create` of it, signed, with one release signature.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startRegistry } from '../../test/helpers/registry.mjs';
import { pushImage, releaseFiles } from '../../test/helpers/images.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BUNDLE_BIN = path.join(ROOT, 'builder', 'bin', 'bundle.js');
export const VERSION = '4.15.1';
const RELEASE = `quay.io/openshift-release-dev/ocp-release:${VERSION}-x86_64`;
const ART = 'quay.io/openshift-release-dev/ocp-v4.0-art-dev';
/** Payload components, each with 12 MiB of random data: pulls that take a moment to watch. */
const COMPONENTS = [
  'cli',
  'etcd',
  'console',
  'installer',
  'oauth-server',
  'machine-config-operator',
];

/** `bundle ARGS` as a child; rejects with its stderr on a non-zero exit. */
export function bundle(args, opts = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BUNDLE_BIN, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...opts,
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => {
      out += c;
    });
    child.stderr.on('data', (c) => {
      err += c;
    });
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`bundle ${args[0]} exited ${code}: ${err.slice(-2000)}`)),
    );
  });
}

async function pushRelease(reg) {
  const payload = {};
  for (const name of COMPONENTS) {
    const img = await pushImage(
      {
        tag: name,
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            layers: [
              { 'etc/os-release': 'rhcos\n' },
              { [`usr/share/${name}/data.bin`]: randomBytes(12 * 1024 * 1024) },
            ],
          },
        ],
      },
      `${reg.host}/openshift-release-dev/ocp-v4.0-art-dev:${name}`,
    );
    payload[name] = `${ART}@${img.digest}`;
  }
  const release = await pushImage(
    {
      tag: `${VERSION}-x86_64`,
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [
            releaseFiles({ version: VERSION, previous: ['4.14.38', '4.15.0'], images: payload }),
          ],
        },
      ],
    },
    `${reg.host}/openshift-release-dev/ocp-release:${VERSION}-x86_64`,
  );
  return { payload, releaseDigest: release.digest };
}

/**
 * The signed bundle of release 4.15.1 (accepting 4.15.0), with a release signature the
 * cluster's ConfigMap does not hold yet. Returns its file, public key and payload references.
 */
export async function makeRelease(h, tmp, cleanups) {
  const reg = await startRegistry();
  cleanups.push(() => reg.stop());
  const { payload, releaseDigest } = await pushRelease(reg);
  const conf = path.join(tmp, 'mirror.conf');
  await writeFile(
    conf,
    `[[registry]]\nprefix = "quay.io/openshift-release-dev"\nlocation = "quay.io/openshift-release-dev"\n[[registry.mirror]]\nlocation = "${reg.host}/openshift-release-dev"\ninsecure = true\n`,
  );
  const key = await h.releaseKey('Release Signing (screenshots)');
  const sig = path.join(tmp, 'signature-1');
  await writeFile(sig, await h.signRelease(key, RELEASE, releaseDigest));
  const factory = path.join(tmp, 'factory');
  await bundle(['keygen', '--out', factory]);
  const file = path.join(tmp, `ocp-${VERSION}.bundle`);
  await bundle([
    'create',
    '--quiet',
    '--release',
    RELEASE,
    '--release-signature',
    sig,
    '--registries-conf',
    conf,
    '--arch',
    'amd64',
    '--key',
    `${factory}.key`,
    '--cache',
    path.join(tmp, 'cache'),
    '-o',
    file,
  ]);
  return { file, pub: `${factory}.pub`, payload, version: VERSION };
}
