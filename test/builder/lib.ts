// Shared helpers for the `bundle` CLI integration tests (test/builder/*.test.ts).
// Everything runs the real CLI (the built dist, bundled: test/helpers/bundled-clis.mjs) and real
// tools (zstd, tar, openssl, skopeo); nothing is mocked.
import { spawn } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cliBin } from '../helpers/bundled-clis.mjs';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BUNDLE_BIN = cliBin('bundle');

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  out: Buffer;
}

export interface RunOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  input?: string | Buffer;
}

/**
 * The environment every CLI run gets: no credentials from the machine's auth files
 * (REGISTRY_AUTH_FILE names a file that does not exist), no $HOME, no $CONTAINERS_REGISTRIES_CONF,
 * no proxy, and /etc/containers, /etc/docker, /run/containers read under a directory that does not exist.
 */
export function hermeticEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.SOURCE_DATE_EPOCH;
  for (const v of [
    'HTTPS_PROXY',
    'https_proxy',
    'HTTP_PROXY',
    'http_proxy',
    'NO_PROXY',
    'no_proxy',
  ])
    delete env[v];
  env.BUNDLE_SYSTEM_ROOT = '/nonexistent/offline-bundle-test/root';
  env.REGISTRY_AUTH_FILE = '/nonexistent/offline-bundle-test/auth.json';
  env.XDG_CACHE_HOME = '/nonexistent/offline-bundle-test/cache';
  // the developer's ~/.config/containers/registries.conf or $CONTAINERS_REGISTRIES_CONF must not reach a test
  env.HOME = '/nonexistent/offline-bundle-test/home';
  delete env.CONTAINERS_REGISTRIES_CONF;
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) delete env[k];
    else env[k] = v;
  }
  return env;
}

export function run(cmd: string, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      env: hermeticEnv(opts.env),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    child.on('error', reject);
    child.on('close', (code) => {
      const buf = Buffer.concat(out);
      resolve({
        code,
        stdout: buf.toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        out: buf,
      });
    });
    // a command that never reads stdin may exit before we close it
    child.stdin.on('error', () => undefined);
    if (opts.input !== undefined) child.stdin.end(opts.input);
    else child.stdin.end();
  });
}

/** `sh -c SCRIPT` (for pipelines such as `zstd -dc F | tar -t`). */
export function sh(script: string, opts: RunOptions = {}): Promise<RunResult> {
  return run('sh', ['-c', script], opts);
}

/** Runs `bundle ARGS...` (the real CLI). */
export function bundle(args: string[], opts: RunOptions = {}): Promise<RunResult> {
  return run(process.execPath, [BUNDLE_BIN, ...args], opts);
}

/** The CODE of the last `bundle: CODE: message` line on stderr. */
export function errorCode(stderr: string): string | undefined {
  const lines = stderr.trimEnd().split('\n');
  return /^bundle: ([A-Z][A-Z0-9_]*): /.exec(lines[lines.length - 1] ?? '')?.[1];
}

/** Single-quotes a string for sh. */
export function q(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

export interface KeyPair {
  key: string;
  pub: string;
  fingerprint: string;
}

export async function keygen(
  dir: string,
  name = 'factory',
  type: 'ecdsa-p256' | 'ed25519' = 'ecdsa-p256',
): Promise<KeyPair> {
  const prefix = path.join(dir, name);
  const r = await bundle(['keygen', '--out', prefix, '--type', type, '--json']);
  if (r.code !== 0) throw new Error(`bundle keygen failed (${r.code}): ${r.stderr}`);
  const j = JSON.parse(r.stdout) as { privateKey: string; publicKey: string; fingerprint: string };
  return { key: j.privateKey, pub: j.publicKey, fingerprint: j.fingerprint };
}

/** `zstd -dc FILE | tar -t`: the archive's entry names in order. */
export async function tarList(file: string): Promise<string[]> {
  const r = await sh(`zstd -dc ${q(file)} | tar -t`);
  if (r.code !== 0) throw new Error(`zstd -dc | tar -t failed: ${r.stderr}`);
  return r.stdout.split('\n').filter(Boolean);
}

/** One entry's bytes, with standard tools: `zstd -dc FILE | tar -xO NAME`. */
export async function tarEntry(file: string, name: string): Promise<Buffer> {
  const r = await sh(`zstd -dc ${q(file)} | tar -xO ${q(name)}`);
  if (r.code !== 0) throw new Error(`zstd -dc | tar -xO ${name} failed: ${r.stderr}`);
  return r.out;
}

export interface BundleJson {
  release: {
    name: string;
    version: string;
    arch: string;
    image: string | null;
    digest: string | null;
    upgradeFrom: string[];
  };
  images: {
    repository: string;
    tag: string | null;
    digest: string;
    mediaType: string;
    platforms: { os: string; architecture: string; variant?: string }[];
    component?: string;
  }[];
  /** Helm charts, apart from images (absent when there are none). */
  charts?: {
    repository: string;
    tag: string | null;
    digest: string;
    mediaType: string;
    platforms: unknown[];
  }[];
  blobs: { digest: string; size: number; mediaType: string }[];
  index: { digest: string; size: number };
  totals: { layoutBytes: number; imageStoreBytes: number };
  creator: { tool: string; version: string; createdAt: string };
  signer: { algorithm: string; fingerprint: string };
}

export async function bundleJson(file: string): Promise<BundleJson> {
  return JSON.parse((await tarEntry(file, 'bundle.json')).toString('utf8')) as BundleJson;
}

export interface LayoutIndex {
  manifests: {
    mediaType: string;
    digest: string;
    size: number;
    annotations?: Record<string, string>;
  }[];
}

export async function layoutIndex(file: string): Promise<LayoutIndex> {
  return JSON.parse((await tarEntry(file, 'index.json')).toString('utf8')) as LayoutIndex;
}

/** The ref names of the bundle's index.json. */
export async function refNames(file: string): Promise<string[]> {
  return (await layoutIndex(file)).manifests
    .map((m) => m.annotations?.['org.opencontainers.image.ref.name'] ?? '')
    .sort();
}

export const hex = (digest: string) => digest.slice('sha256:'.length);
export const blobEntry = (digest: string) => `blobs/sha256/${hex(digest)}`;

/** An auth.json as podman/skopeo write it. */
export async function writeAuthFile(file: string, host: string, creds: string): Promise<string> {
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(
    file,
    JSON.stringify({ auths: { [host]: { auth: Buffer.from(creds).toString('base64') } } }),
  );
  return file;
}

/** Directory entries, or [] when it does not exist. */
export async function listDir(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

export async function readJson<T = unknown>(file: string): Promise<T> {
  return JSON.parse(await readFile(file, 'utf8')) as T;
}
