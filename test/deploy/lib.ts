// Shared by test/deploy: agent images made offline, bundles with their agent sidecar made by the
// real `bundle create --agent-image`, and the real bootstrap script run against a containers-storage
// under a temp root (vfs driver) with real skopeo and openssl. No systemd here (--no-start): the
// booted-node test runs the same script under systemd.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { writeImageLayout } from '../helpers/images.mjs';
import { bundle, keygen, ROOT, type KeyPair } from '../builder/lib.js';

export const BOOTSTRAP = path.join(ROOT, 'deploy/openshift/bundle-agent-bootstrap.sh');
export const AGENT_REPOSITORY = 'localhost/offline-bundle/bundle-agent';

export interface Sidecar {
  dir: string;
  bundle: string;
  archive: string;
  statement: string;
  manifest: string;
  version: string;
  arch: string;
}

/**
 * An agent image (one layer of `layerBytes` random bytes: incompressible, so it takes that much
 * room in a store) for `arch`, bundled with `--agent-image` and signed with `key`.
 */
export async function makeSidecar(
  work: string,
  key: KeyPair,
  opts: { version: string; arch?: string; layerBytes?: number; name?: string },
): Promise<Sidecar> {
  const arch = opts.arch ?? 'amd64';
  const name = opts.name ?? `${opts.version}-${arch}`;
  const layout = path.join(work, `layout-${name}`);
  const img = await writeImageLayout(layout, {
    tag: 'agent',
    platforms: [
      {
        os: 'linux',
        architecture: arch,
        layers: [{ 'usr/local/bin/bundle-agent': randomBytes(opts.layerBytes ?? 4096) }],
        config: { Labels: { 'org.opencontainers.image.version': opts.version } },
      },
    ],
  });
  const dir = path.join(work, `out-${name}`);
  await mkdir(dir, { recursive: true });
  const out = path.join(dir, `release-${name}.bundle`);
  const r = await bundle([
    'create',
    '--quiet',
    '--key',
    key.key,
    '--version',
    '1.0.0',
    '--arch',
    arch,
    '--cache',
    path.join(work, 'cache'),
    '--agent-image',
    `oci:${layout}:agent`,
    '-o',
    out,
  ]);
  if (r.code !== 0) throw new Error(`bundle create: ${r.stderr}`);
  const archive = path.join(dir, `bundle-agent-${opts.version}-${arch}.oci.tar`);
  return {
    dir,
    bundle: out,
    archive,
    statement: `${archive}.sig`,
    manifest: img.digest,
    version: opts.version,
    arch,
  };
}

export interface Node {
  /** --root: the drop-in, /run/issue.d, the lock */
  root: string;
  media: string;
  keys: string;
  work: string;
  /** DRIVER@GRAPHROOT+RUNROOT */
  storage: string;
}

/**
 * The agent's unit as the MachineConfig installs it: the Quadlet file, or the plain unit (--plain-unit).
 * Its default tag stays below the agents the tests' sticks upgrade to (0.8.0 on), as a first
 * install's is; not generate.mjs's (the release's version), which would one day overtake them.
 */
export async function unitFiles(
  form: 'quadlet' | 'plain',
  image = `${AGENT_REPOSITORY}:0.1.0`,
): Promise<{ path: string; contents: string }> {
  const gen = (await import(path.join(ROOT, 'deploy/openshift/generate.mjs'))) as {
    plainUnit: (text: string) => string;
  };
  const container = (
    await readFile(path.join(ROOT, 'deploy/openshift/bundle-agent.container'), 'utf8')
  ).replaceAll('@IMAGE@', image);
  return form === 'quadlet'
    ? { path: 'etc/containers/systemd/bundle-agent.container', contents: container }
    : { path: 'etc/systemd/system/bundle-agent.service', contents: gen.plainUnit(container) };
}

export async function makeNode(
  dir: string,
  key: KeyPair,
  opts: { storeRoot?: string; work?: string; unit?: 'quadlet' | 'plain' | 'none' } = {},
): Promise<Node> {
  const node: Node = {
    root: path.join(dir, 'root'),
    media: path.join(dir, 'root/run/media'),
    keys: path.join(dir, 'root/etc/bundle-agent/keys'),
    work: opts.work ?? path.join(dir, 'root/var/tmp'),
    storage: `vfs@${opts.storeRoot ?? path.join(dir, 'storage')}/root+${opts.storeRoot ?? path.join(dir, 'storage')}/run`,
  };
  for (const d of [node.media, node.keys, node.work, path.join(node.root, 'run/issue.d')])
    await mkdir(d, { recursive: true });
  await writeKey(node, key);
  if (opts.unit !== 'none') {
    const u = await unitFiles(opts.unit ?? 'quadlet');
    await mkdir(path.join(node.root, path.dirname(u.path)), { recursive: true });
    await writeFile(path.join(node.root, u.path), u.contents);
  }
  return node;
}

export async function writeKey(node: Node, key: KeyPair, name = 'factory.pub'): Promise<void> {
  const { copyFile } = await import('node:fs/promises');
  await copyFile(key.pub, path.join(node.keys, name));
}

export interface BootstrapRun {
  code: number | null;
  stderr: string;
  console: string | undefined;
  dropIn: string | undefined;
}

/** Runs the bootstrap with --keys node.keys, or as the unit does (trust from the config) with `keys: 'config'`. */
export function runBootstrap(
  node: Node,
  extra: string[] = [],
  opts: { keys?: 'dir' | 'config' } = {},
): Promise<BootstrapRun> {
  return new Promise((resolve, reject) => {
    const keys = opts.keys === 'config' ? [] : ['--keys', node.keys];
    const child = spawn(
      '/bin/bash',
      [
        BOOTSTRAP,
        '--media',
        node.media,
        ...keys,
        '--root',
        node.root,
        '--work',
        node.work,
        '--storage',
        node.storage,
        '--no-start',
        ...extra,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.on('error', reject);
    child.on('close', async (code) => {
      const dropIn = await readFile(
        path.join(node.root, 'etc/containers/systemd/bundle-agent.container.d/image.conf'),
        'utf8',
      )
        .catch(() =>
          readFile(
            path.join(node.root, 'etc/systemd/system/bundle-agent.service.d/image.conf'),
            'utf8',
          ),
        )
        .catch(() => undefined);
      resolve({
        code,
        stderr,
        console: await readFile(
          path.join(node.root, 'run/issue.d/bundle-agent.issue'),
          'utf8',
        ).catch(() => undefined),
        dropIn,
      });
    });
  });
}

/** `skopeo inspect` of the store: the manifest digest of REF, or undefined when the store has no such image. */
export function storedDigest(node: Node, ref: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const child = spawn(
      'skopeo',
      ['inspect', '--format', '{{.Digest}}', `containers-storage:[${node.storage}]${ref}`],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    child.on('close', (code) => resolve(code === 0 ? out.trim() : undefined));
  });
}

/** Images and layers the store holds (its JSON records): nothing half-loaded means both empty. */
export async function storeContents(node: Node): Promise<{ images: unknown[]; layers: unknown[] }> {
  const graph = node.storage.slice(node.storage.indexOf('@') + 1, node.storage.indexOf('+'));
  const read = async (f: string) =>
    JSON.parse(await readFile(path.join(graph, f), 'utf8').catch(() => '[]')) as unknown[];
  return {
    images: await read('vfs-images/images.json'),
    layers: await read('vfs-layers/layers.json'),
  };
}

export async function workLeftovers(node: Node): Promise<string[]> {
  return (await readdir(node.work)).filter((f) => f.startsWith('bundle-agent-bootstrap'));
}

export { keygen, bundle };
export type { KeyPair };
