#!/usr/bin/env node
// The whole product on one machine, with generated images and real peers:
//   factory: a docker-registry on 127.0.0.1 holds an OpenShift-shaped release (a release image
//   whose release-manifests/image-references lists three payload images) plus an extra image;
//   `bundle create` builds a signed bundle through a registries.conf mirror;
//   node: a loop-mounted "USB stick", a private containerd (CRI on its own socket), and
//   `bundle-agent load` staging, serving, pulling through the CRI, pinning, reporting.
// Needs root (mount, containerd). Everything lives in a temp dir removed at the end.
import { execFileSync, spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile, copyFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { startRegistry } from '../test/helpers/registry.mjs';
import { pushImage, releaseFiles } from '../test/helpers/images.mjs';
import { startContainerd } from '../test/helpers/containerd.mjs';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const BUNDLE = path.join(ROOT, 'builder/bin/bundle.js');
const AGENT = path.join(ROOT, 'agent/bin/bundle-agent.js');
const say = (s) => process.stdout.write(`\n\x1b[1m== ${s}\x1b[0m\n`);

function cli(bin, args, opts = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin, ...args], {
      stdio: ['ignore', 'inherit', opts.quietStderr ? 'ignore' : 'inherit'],
    });
    child.on('error', reject);
    child.on('close', (code) =>
      (opts.okCodes ?? [0]).includes(code)
        ? resolve()
        : reject(new Error(`${path.basename(bin)} ${args[0]} exited ${code}`)),
    );
  });
}

if (process.getuid?.() !== 0) {
  console.error('demo: run as root (it loop-mounts a "USB stick" and starts a private containerd)');
  process.exit(1);
}

const tmp = await mkdtemp(path.join(os.tmpdir(), 'ob-demo-'));
const cleanups = [];
try {
  say('factory: a registry with an OpenShift-shaped release and an extra image');
  const reg = await startRegistry();
  cleanups.push(() => reg.stop());
  const payload = {};
  for (const name of ['cli', 'etcd', 'console']) {
    const img = await pushImage(
      {
        tag: name,
        platforms: [
          {
            os: 'linux',
            architecture: 'amd64',
            layers: [
              { 'etc/os-release': 'demo base\n' },
              { [`usr/bin/${name}`]: `#!/bin/sh\necho ${name}\n` },
            ],
          },
        ],
      },
      `${reg.host}/openshift-release-dev/ocp-v4.0-art-dev:${name}`,
    );
    payload[name] = `quay.io/openshift-release-dev/ocp-v4.0-art-dev@${img.digest}`;
  }
  await pushImage(
    {
      tag: '4.14.39-x86_64',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [
            releaseFiles({ version: '4.14.39', previous: ['4.14.37', '4.14.38'], images: payload }),
          ],
        },
      ],
    },
    `${reg.host}/openshift-release-dev/ocp-release:4.14.39-x86_64`,
  );
  // 48 MiB of random data, so the copy and its progress take a moment
  await pushImage(
    {
      tag: 'v2',
      platforms: [
        {
          os: 'linux',
          architecture: 'amd64',
          layers: [
            { 'etc/os-release': 'demo base\n' },
            { 'srv/app': 'workload v2\n', 'srv/data.bin': randomBytes(48 * 1024 * 1024) },
          ],
        },
        { os: 'linux', architecture: 'arm64', layers: [{ 'srv/app': 'workload v2 arm\n' }] },
      ],
    },
    `${reg.host}/acme/workload:v2`,
  );
  const conf = path.join(tmp, 'mirror.conf');
  await writeFile(
    conf,
    `[[registry]]\nprefix = "quay.io/openshift-release-dev"\nlocation = "quay.io/openshift-release-dev"\n[[registry.mirror]]\nlocation = "${reg.host}/openshift-release-dev"\ninsecure = true\n\n[[registry]]\nprefix = "registry.example.com/acme"\nlocation = "${reg.host}/acme"\ninsecure = true\n`,
  );
  console.log(
    `registry ${reg.host}; quay.io/openshift-release-dev and registry.example.com/acme are mirrored to it (${conf})`,
  );

  say('factory: bundle keygen, bundle create, inspect, verify');
  await cli(BUNDLE, ['keygen', '--out', path.join(tmp, 'factory')]);
  const file = path.join(tmp, 'ocp-4.14.39.bundle');
  await cli(BUNDLE, [
    'create',
    '--release',
    'quay.io/openshift-release-dev/ocp-release:4.14.39-x86_64',
    '--image',
    'registry.example.com/acme/workload:v2',
    '--registries-conf',
    conf,
    '--arch',
    'amd64',
    '--key',
    path.join(tmp, 'factory.key'),
    '--cache',
    path.join(tmp, 'cache'),
    '-o',
    file,
  ]);
  await cli(BUNDLE, ['inspect', file]);
  await cli(BUNDLE, ['verify', file, '--key', path.join(tmp, 'factory.pub')]);
  console.log(
    execFileSync('sh', ['-c', `zstd -dc '${file}' | tar -t | head -5; echo ...`], {
      encoding: 'utf8',
    }).trimEnd(),
  );

  say('site: copy the bundle to a USB stick (a loop-mounted ext4 image)');
  const node = path.join(tmp, 'node');
  const stick = path.join(node, 'media/usb');
  await mkdir(stick, { recursive: true });
  const img = path.join(tmp, 'stick.img');
  execFileSync('truncate', ['-s', '160M', img]);
  execFileSync('mkfs.ext4', ['-q', '-F', '-L', 'STICK', img]);
  execFileSync('mount', ['-o', 'loop', img, stick]);
  cleanups.push(() => execFileSync('umount', ['-l', stick]));
  await copyFile(file, path.join(stick, path.basename(file)));
  await copyFile(`${file}.sha256`, path.join(stick, `${path.basename(file)}.sha256`));
  console.log(execFileSync('ls', ['-l', stick], { encoding: 'utf8' }).trimEnd());

  say('node: containerd on its own socket, bundle-agent configured to trust factory.pub');
  const ctd = await startContainerd(30_000, {
    certsDir: path.join(node, 'etc/containerd/certs.d'),
    socket: path.join(node, 'run/containerd/containerd.sock'),
  });
  cleanups.push(() => ctd.stop());
  await mkdir(path.join(node, 'etc/bundle-agent/keys'), { recursive: true });
  await copyFile(
    path.join(tmp, 'factory.pub'),
    path.join(node, 'etc/bundle-agent/keys/factory.pub'),
  );
  const config = path.join(node, 'etc/bundle-agent/config.yaml');
  await writeFile(
    config,
    `root: ${node}\nnodeName: demo-node\nruntime: containerd\narch: amd64\ntrust:\n  keys: [/etc/bundle-agent/keys/factory.pub]\nversion:\n  current: "4.14.38"\nspace:\n  reserveBytes: 0\n`,
  );
  console.log(`config ${config} (every path under ${node})`);

  say("node: bundle-agent load (the technician's status lines; agent log on stderr)");
  await cli(AGENT, ['load', path.join(stick, path.basename(file)), '--config', config], {
    quietStderr: true,
  });
  say('node: bundle-agent status');
  // exit 3: no daemon runs here (a one-shot load did the work), as `systemctl status` says of a stopped unit
  await cli(AGENT, ['status', '--config', config], { okCodes: [0, 3] });

  say('node: what containerd now holds (CRI ListImages via ctr), pinned');
  console.log(
    execFileSync('ctr', ['-a', ctd.socket, '-n', 'k8s.io', 'images', 'ls'], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.includes('@sha256') || l.startsWith('REF'))
      .map((l) =>
        l
          .split(/\s+/)
          .filter((_, i) => i === 0 || /pinned/.test(_))
          .join('  '),
      )
      .join('\n'),
  );
  say('demo complete');
} finally {
  for (const c of cleanups.reverse()) {
    try {
      await c();
    } catch {
      /* best effort */
    }
  }
  await rm(tmp, { recursive: true, force: true });
}
