import { readdir, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { OciError } from './errors.js';
import { readSmallFile } from '@offline-bundle/host';
import type { ImageReference } from './reference.js';
import { repositoryName } from './reference.js';
import { systemRoot } from '@offline-bundle/host';

/** Names the registries.conf to read instead of the system's, as for podman and skopeo. */
export const REGISTRIES_CONF_ENV = 'CONTAINERS_REGISTRIES_CONF';

export type PullFromMirror = 'all' | 'digest-only' | 'tag-only';

export interface MirrorRule {
  location: string;
  insecure: boolean;
}

export interface RegistryRule {
  /** The namespace this rule covers ("prefix" in registries.conf, default: location). */
  prefix: string;
  location: string;
  insecure: boolean;
  blocked: boolean;
  mirrors: (MirrorRule & { pullFromMirror: PullFromMirror })[];
}

interface RawRegistry {
  prefix?: string;
  location?: string;
  insecure?: boolean;
  blocked?: boolean;
  'mirror-by-digest-only'?: boolean;
  mirror?: { location?: string; insecure?: boolean; 'pull-from-mirror'?: string }[];
}

/** One place a pull may go: a mirror or the source itself, with the repository rewritten. */
export interface PullSource {
  registry: string;
  repository: string;
  insecure: boolean;
  mirror: boolean;
}

function parseRules(text: string, file: string): RegistryRule[] {
  let doc: { registry?: RawRegistry[] };
  try {
    doc = parseToml(text) as { registry?: RawRegistry[] };
  } catch (cause) {
    // smol-toml appends a multi-line code frame; keep the message one line (the CLI prints one)
    const e = cause as Error & { line?: number; column?: number };
    const where = e.line ? ` (line ${e.line}, column ${e.column})` : '';
    throw new OciError('INVALID_CONFIG', `${file} is not valid TOML${where}: ${e.message.split('\n')[0]}`, { cause });
  }
  return (doc.registry ?? []).map((r, i) => {
    // containers/image trims trailing slashes; a kept one would double or drop a separator in rewrites.
    const trim = (v: string | undefined) => v?.replace(/\/+$/, '');
    const prefix = trim(r.prefix ?? r.location);
    if (!prefix) throw new OciError('INVALID_CONFIG', `${file}: [[registry]] #${i + 1} needs "location" or "prefix"`);
    if (prefix.startsWith('*.')) throw new OciError('INVALID_CONFIG', `${file}: wildcard prefix "${prefix}" is not supported; name the registry`);
    const location = trim(r.location) ?? prefix;
    const byDigestOnly = r['mirror-by-digest-only'] === true;
    return {
      prefix,
      location,
      insecure: r.insecure === true,
      blocked: r.blocked === true,
      mirrors: (r.mirror ?? []).map((m, j) => {
        if (!m.location) throw new OciError('INVALID_CONFIG', `${file}: mirror #${j + 1} of "${prefix}" has no location`);
        if (byDigestOnly && m['pull-from-mirror'] !== undefined) {
          throw new OciError('INVALID_CONFIG', `${file}: "${prefix}" sets both mirror-by-digest-only and pull-from-mirror; use pull-from-mirror only`);
        }
        const pfm = m['pull-from-mirror'] ?? (byDigestOnly ? 'digest-only' : 'all');
        if (pfm !== 'all' && pfm !== 'digest-only' && pfm !== 'tag-only') {
          throw new OciError('INVALID_CONFIG', `${file}: pull-from-mirror must be all, digest-only or tag-only, not "${pfm}"`);
        }
        return { location: trim(m.location)!, insecure: m.insecure === true, pullFromMirror: pfm };
      }),
    };
  });
}

/** Far above any real registries.conf: a larger file is the wrong file, not to be parsed whole. */
export const MAX_REGISTRIES_CONF_BYTES = 1024 * 1024;

async function readConf(path: string): Promise<string> {
  try {
    return (await readSmallFile(path, MAX_REGISTRIES_CONF_BYTES)).bytes.toString('utf8');
  } catch (cause) {
    throw new OciError('INVALID_CONFIG', `cannot read registries config ${path}: ${(cause as Error).message}`, { cause });
  }
}

/**
 * containers-registries.conf(5) mirror rules: the longest matching prefix decides, mirrors
 * are tried in order, then the (rewritten) location unless blocked. Drop-ins in a
 * registries.conf.d directory override rules with the same prefix, files in lexical order.
 */
export class RegistriesConf {
  constructor(readonly rules: RegistryRule[] = []) {}

  static async load(path: string): Promise<RegistriesConf> {
    return new RegistriesConf(parseRules(await readConf(path), path));
  }

  static async loadDir(dir: string, base?: RegistriesConf): Promise<RegistriesConf> {
    const byPrefix = new Map((base?.rules ?? []).map((r) => [r.prefix, r]));
    let names: string[] = [];
    try {
      names = (await readdir(dir)).filter((n) => n.endsWith('.conf')).sort();
    } catch {
      // a missing drop-in directory means no drop-ins
    }
    for (const name of names) {
      const file = join(dir, name);
      for (const rule of parseRules(await readConf(file), file)) byPrefix.set(rule.prefix, rule);
    }
    return new RegistriesConf([...byPrefix.values()]);
  }

  /**
   * The configuration podman and skopeo read when given none (containers/image's order):
   * $CONTAINERS_REGISTRIES_CONF, else ~/.config/containers/registries.conf when it exists (with
   * only its own registries.conf.d), else /etc/containers/registries.conf (absent: no rules);
   * then the drop-ins of /etc/containers/registries.conf.d and ~/.config/containers/registries.conf.d.
   * /etc is taken under BUNDLE_SYSTEM_ROOT (see system-root.ts).
   */
  static async loadSystem(env: NodeJS.ProcessEnv = process.env): Promise<RegistriesConf> {
    const etc = join(systemRoot(env), 'etc', 'containers');
    const user = join(env.HOME ?? homedir(), '.config', 'containers');
    const userFile = join(user, 'registries.conf');
    const named = env[REGISTRIES_CONF_ENV];
    const userOwn = !named && (await stat(userFile).catch(() => undefined)) !== undefined;
    const file = named || (userOwn ? userFile : join(etc, 'registries.conf'));
    // a file named (by the variable or by being the user's) must be read; the system's may be absent
    const base = named || userOwn || (await stat(file).catch(() => undefined)) ? await RegistriesConf.load(file) : new RegistriesConf();
    const dirs = userOwn ? [join(user, 'registries.conf.d')] : [join(etc, 'registries.conf.d'), join(user, 'registries.conf.d')];
    let conf = base;
    for (const dir of dirs) conf = await RegistriesConf.loadDir(dir, conf);
    return conf;
  }

  /** The rule whose prefix is the longest match of "registry/repository" at a path boundary. */
  match(ref: ImageReference): RegistryRule | undefined {
    const name = repositoryName(ref);
    let best: RegistryRule | undefined;
    for (const rule of this.rules) {
      const p = rule.prefix;
      if (name === p || name.startsWith(p.endsWith('/') ? p : `${p}/`)) {
        if (!best || p.length > best.prefix.length) best = rule;
      }
    }
    return best;
  }

  /** Where to pull `ref` from, in order. */
  pullSources(ref: ImageReference, defaultInsecure = false): PullSource[] {
    const rule = this.match(ref);
    const name = repositoryName(ref);
    const split = (full: string, insecure: boolean, mirror: boolean): PullSource => {
      const slash = full.indexOf('/');
      if (slash < 0) throw new OciError('INVALID_CONFIG', `registry location "${full}" rewrites "${name}" to a name without a repository`);
      return { registry: full.slice(0, slash), repository: full.slice(slash + 1), insecure, mirror };
    };
    if (!rule) return [split(name, defaultInsecure, false)];
    const suffix = name.slice(rule.prefix.length);
    const byDigest = ref.digest !== undefined;
    const out: PullSource[] = [];
    for (const m of rule.mirrors) {
      if (m.pullFromMirror === 'digest-only' && !byDigest) continue;
      if (m.pullFromMirror === 'tag-only' && byDigest) continue;
      out.push(split(m.location + suffix, m.insecure || defaultInsecure, true));
    }
    if (!rule.blocked) out.push(split(rule.location + suffix, rule.insecure || defaultInsecure, false));
    if (out.length === 0) throw new OciError('NOT_FOUND', `registry "${rule.prefix}" is blocked in registries.conf and no mirror serves ${name}`);
    return out;
  }
}
