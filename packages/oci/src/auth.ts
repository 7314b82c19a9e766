import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { OciError } from './errors.js';

export interface Credentials {
  username?: string;
  password?: string;
  /** An OAuth2 refresh token ("identitytoken" in auth.json). */
  identityToken?: string;
}

interface AuthEntry { auth?: string; identitytoken?: string; username?: string; password?: string }
type AuthFile = { auths?: Record<string, AuthEntry> };

/** The files podman and skopeo read, in their order (containers-auth.json(5)). */
export function defaultAuthFiles(env: NodeJS.ProcessEnv = process.env): string[] {
  if (env.REGISTRY_AUTH_FILE) return [env.REGISTRY_AUTH_FILE];
  const home = env.HOME ?? homedir();
  const files: string[] = [];
  if (env.XDG_RUNTIME_DIR) files.push(join(env.XDG_RUNTIME_DIR, 'containers', 'auth.json'));
  files.push(join(env.XDG_CONFIG_HOME ?? join(home, '.config'), 'containers', 'auth.json'));
  files.push(join(env.DOCKER_CONFIG ?? join(home, '.docker'), 'config.json'));
  return files;
}

function normalizeKey(key: string): string {
  return key.replace(/^https?:\/\//, '').replace(/\/v[12]\/?$/, '').replace(/\/+$/, '')
    .replace(/^(index\.)?docker\.io$/, 'docker.io').replace(/^registry-1\.docker\.io$/, 'docker.io');
}

function decodeEntry(entry: AuthEntry, file: string, key: string): Credentials {
  if (entry.identitytoken) return { identityToken: entry.identitytoken };
  if (entry.auth) {
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(entry.auth) || entry.auth.length % 4 !== 0) {
      throw new OciError('INVALID_CONFIG', `${file}: the "auth" of ${key} is not valid base64`);
    }
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) throw new OciError('INVALID_CONFIG', `${file}: the "auth" of ${key} is not base64 of user:password`);
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  }
  if (entry.username) return { username: entry.username, password: entry.password ?? '' };
  return {};
}

/**
 * Credentials for "registry/repository": the most specific key wins ("host/ns/repo" before
 * "host/ns" before "host"), and the first file that has any match wins, as containers/image does.
 */
export class AuthStore {
  private readonly files: { path: string; auths: Record<string, AuthEntry> }[] = [];

  constructor(paths: string[]) {
    for (const path of paths) {
      let text: string;
      try {
        text = readFileSync(path, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        throw new OciError('INVALID_CONFIG', `cannot read auth file ${path}: ${(err as Error).message}`, { cause: err });
      }
      let doc: AuthFile;
      try {
        doc = JSON.parse(text) as AuthFile;
      } catch (cause) {
        throw new OciError('INVALID_CONFIG', `auth file ${path} is not valid JSON`, { cause });
      }
      const auths: Record<string, AuthEntry> = {};
      for (const [k, v] of Object.entries(doc.auths ?? {})) auths[normalizeKey(k)] = v;
      this.files.push({ path, auths });
    }
  }

  static fromOptions(authfile?: string): AuthStore {
    return new AuthStore(authfile ? [authfile] : defaultAuthFiles());
  }

  lookup(registry: string, repository: string): Credentials | undefined {
    const candidates: string[] = [];
    const parts = repository.split('/');
    for (let i = parts.length; i > 0; i--) candidates.push(`${registry}/${parts.slice(0, i).join('/')}`);
    candidates.push(registry);
    for (const file of this.files) {
      for (const key of candidates) {
        const entry = file.auths[key];
        if (entry) return decodeEntry(entry, file.path, key);
      }
    }
    return undefined;
  }
}
