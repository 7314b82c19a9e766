import { closeSync, constants, fstatSync, openSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { helperCredentials, type HelperOptions } from './credential-helper.js';
import { OciError } from '@offline-bundle/oci';
import { systemRoot } from '@offline-bundle/host';
import type { Credentials } from './credentials.js';

export type { Credentials } from './credentials.js';

interface AuthEntry {
  auth?: string;
  identitytoken?: string;
  username?: string;
  password?: string;
}
type AuthFileDoc = {
  auths?: Record<string, AuthEntry>;
  credHelpers?: Record<string, string>;
  credsStore?: string;
};

/** One credentials file: containers' auth.json, Docker's config.json, or the legacy ~/.dockercfg. */
interface AuthFile {
  path: string;
  /** ~/.dockercfg: the registries are the top-level keys. */
  legacy?: boolean;
  /** The system-wide file is refused when others than its owner may read it (as containers/image). */
  ownerOnly?: boolean;
}

interface AuthFileOptions {
  /** Stands for "/" in /run/containers and /etc/containers (see system-root.ts). */
  systemRoot?: string;
  uid?: number;
}

/** The files podman and skopeo read, in their order (containers-auth.json(5), containers/image getAuthFilePaths). */
export function defaultAuthFiles(
  env: NodeJS.ProcessEnv = process.env,
  opts: AuthFileOptions = {},
): AuthFile[] {
  if (env.REGISTRY_AUTH_FILE) return [{ path: env.REGISTRY_AUTH_FILE }];
  const home = env.HOME ?? homedir();
  const root = opts.systemRoot ?? systemRoot(env);
  const uid = opts.uid ?? process.getuid?.() ?? 0;
  const system: AuthFile = { path: join(root, 'etc', 'containers', 'auth.json'), ownerOnly: true };
  // root in a systemd unit prefers the system-wide file; root elsewhere reads it last
  const systemd = uid === 0 && Boolean(env.INVOCATION_ID);
  return [
    ...(systemd ? [system] : []),
    {
      path: env.XDG_RUNTIME_DIR
        ? join(env.XDG_RUNTIME_DIR, 'containers', 'auth.json')
        : join(root, 'run', 'containers', String(uid), 'auth.json'),
    },
    { path: join(env.XDG_CONFIG_HOME ?? join(home, '.config'), 'containers', 'auth.json') },
    { path: join(env.DOCKER_CONFIG ?? join(home, '.docker'), 'config.json') },
    { path: join(home, '.dockercfg'), legacy: true },
    ...(uid === 0 && !systemd ? [system] : []),
  ];
}

function normalizeKey(key: string): string {
  return key
    .replace(/^https?:\/\//, '')
    .replace(/\/v[12]\/?$/, '')
    .replace(/\/+$/, '')
    .replace(/^(index\.)?docker\.io$/, 'docker.io')
    .replace(/^registry-1\.docker\.io$/, 'docker.io');
}

function decodeEntry(entry: AuthEntry, file: string, key: string): Credentials {
  if (entry.identitytoken) return { identityToken: entry.identitytoken };
  if (entry.auth) {
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(entry.auth) || entry.auth.length % 4 !== 0) {
      throw new OciError('INVALID_CONFIG', `${file}: the "auth" of ${key} is not valid base64`);
    }
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0)
      throw new OciError(
        'INVALID_CONFIG',
        `${file}: the "auth" of ${key} is not base64 of user:password`,
      );
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  }
  if (entry.username) return { username: entry.username, password: entry.password ?? '' };
  return {};
}

/** An auth.json with a few hundred registries is some tens of KiB. */
export const MAX_AUTH_FILE_BYTES = 1024 * 1024;

function readAuthFile(path: string, ownerOnly: boolean): string {
  // O_NONBLOCK: a FIFO put where the file was expected must not hang the open
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile())
      throw new OciError('NOT_A_REGULAR_FILE', `auth file ${path} is not a regular file`);
    if (st.size > MAX_AUTH_FILE_BYTES)
      throw new OciError(
        'FILE_TOO_LARGE',
        `auth file ${path} is over ${MAX_AUTH_FILE_BYTES} bytes: is it the right file?`,
      );
    if (ownerOnly && (st.mode & 0o044) !== 0)
      throw new OciError(
        'INVALID_CONFIG',
        `${path} is readable by others than its owner: chmod 600 ${path}`,
      );
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

interface AuthStoreOptions {
  /** --creds USER:PASSWORD: used for every registry, before any file (as skopeo's --creds). */
  creds?: string;
  /** How docker-credential-* helpers are run (environment with PATH, time limit). */
  helpers?: HelperOptions;
}

/** "USER:PASSWORD" as given to --creds. */
function parseCreds(value: string): Credentials {
  const colon = value.indexOf(':');
  if (colon <= 0)
    throw new OciError(
      'INVALID_CONFIG',
      '--creds needs USER:PASSWORD (or log in with "podman login" and leave --creds out)',
    );
  return { username: value.slice(0, colon), password: value.slice(colon + 1) };
}

const isEmpty = (e: AuthEntry) => !e.auth && !e.identitytoken && !e.username;

interface LoadedFile {
  path: string;
  auths: Record<string, AuthEntry>;
  credHelpers: Record<string, string>;
  credsStore?: string;
}

/**
 * Credentials for "registry/repository", looked up as containers/image does: --creds first;
 * then file by file, the registry's `credHelpers` helper, else the most specific `auths` key
 * ("host/ns/repo" before "host/ns" before "host"), else the file's `credsStore` helper (as
 * Docker); the first file with an answer wins.
 */
export class AuthStore {
  private readonly files: LoadedFile[] = [];
  private readonly creds?: Credentials;
  private readonly asked = new Map<string, Promise<Credentials | undefined>>();

  constructor(
    paths: (string | AuthFile)[],
    private readonly opts: AuthStoreOptions = {},
  ) {
    if (opts.creds !== undefined) this.creds = parseCreds(opts.creds);
    for (const p of paths) {
      const file = typeof p === 'string' ? { path: p } : p;
      const { path } = file;
      let text: string;
      try {
        text = readAuthFile(path, file.ownerOnly === true);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        if (err instanceof OciError) throw err;
        throw new OciError(
          'INVALID_CONFIG',
          `cannot read auth file ${path}: ${(err as Error).message}`,
          { cause: err },
        );
      }
      let doc: AuthFileDoc;
      try {
        doc = JSON.parse(text) as AuthFileDoc;
      } catch (cause) {
        throw new OciError('INVALID_CONFIG', `auth file ${path} is not valid JSON`, { cause });
      }
      const raw = file.legacy ? (doc as Record<string, AuthEntry>) : (doc.auths ?? {});
      const auths: Record<string, AuthEntry> = {};
      for (const [k, v] of Object.entries(raw)) auths[normalizeKey(k)] = v;
      const credHelpers: Record<string, string> = {};
      for (const [k, v] of Object.entries(file.legacy ? {} : (doc.credHelpers ?? {})))
        credHelpers[normalizeKey(k)] = v;
      this.files.push({
        path,
        auths,
        credHelpers,
        ...(!file.legacy && doc.credsStore ? { credsStore: doc.credsStore } : {}),
      });
    }
  }

  /**
   * The store for the builder's options: --authfile alone (it must exist), else
   * REGISTRY_AUTH_FILE alone, else every default location.
   */
  static fromOptions(
    authfile?: string,
    opts: AuthStoreOptions & { env?: NodeJS.ProcessEnv } = {},
  ): AuthStore {
    const env = opts.env ?? process.env;
    if (authfile) {
      try {
        statSync(authfile);
      } catch (cause) {
        throw new OciError(
          'INVALID_CONFIG',
          `--authfile ${authfile}: ${(cause as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (cause as Error).message} (log in with "podman login --authfile ${authfile} REGISTRY", or leave --authfile out to read the default files)`,
          { cause },
        );
      }
    }
    return new AuthStore(authfile ? [authfile] : defaultAuthFiles(env), {
      ...opts,
      helpers: { env, ...opts.helpers },
    });
  }

  /** A helper's answer, asked once per helper and registry. */
  private helper(name: string, registry: string, source: string): Promise<Credentials | undefined> {
    const key = `${name} ${registry}`;
    let answer = this.asked.get(key);
    if (!answer) {
      // "docker login" stores Docker Hub's credentials under its v1 index URL
      answer = helperCredentials(
        name,
        registry === 'docker.io' ? 'https://index.docker.io/v1/' : registry,
        source,
        this.opts.helpers,
      );
      this.asked.set(key, answer);
    }
    return answer;
  }

  async lookup(registry: string, repository: string): Promise<Credentials | undefined> {
    if (this.creds) return this.creds;
    const candidates: string[] = [];
    const parts = repository.split('/');
    for (let i = parts.length; i > 0; i--)
      candidates.push(`${registry}/${parts.slice(0, i).join('/')}`);
    candidates.push(registry);
    for (const file of this.files) {
      const helper = file.credHelpers[registry];
      if (helper) {
        const c = await this.helper(helper, registry, `credHelpers in ${file.path}`);
        if (c) return c;
        continue;
      }
      const key = candidates.find((k) => file.auths[k]);
      const entry = key ? file.auths[key]! : undefined;
      if (entry && !isEmpty(entry)) return decodeEntry(entry, file.path, key!);
      if (file.credsStore) {
        const c = await this.helper(file.credsStore, registry, `credsStore in ${file.path}`);
        if (c) return c;
      }
      if (entry) return {};
    }
    return undefined;
  }
}
