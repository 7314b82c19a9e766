import { readdir, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { OciError, repositoryName } from '@offline-bundle/oci';
import { readSmallFile } from '@offline-bundle/host';
import type { ImageReference } from '@offline-bundle/oci';
import { systemRoot } from '@offline-bundle/host';

/** Names the registries.conf to read instead of the system's, as for podman and skopeo. */
const REGISTRIES_CONF_ENV = 'CONTAINERS_REGISTRIES_CONF';

type PullFromMirror = 'all' | 'digest-only' | 'tag-only';

interface MirrorRule {
  location: string;
  insecure: boolean;
}

interface RegistryRule {
  /** The namespace this rule covers ("prefix" in registries.conf, default: location); "*.example.com" covers its subdomains' hosts. */
  prefix: string;
  /** Empty for a wildcard prefix: the matched host is the location. */
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
    throw new OciError(
      'INVALID_CONFIG',
      `${file} is not valid TOML${where}: ${e.message.split('\n')[0]}`,
      { cause },
    );
  }
  return (doc.registry ?? []).map((r, i) => {
    // containers/image trims trailing slashes; a kept one would double or drop a separator in rewrites.
    const trim = (v: string | undefined) => v?.replace(/\/+$/, '');
    const prefix = trim(r.prefix ?? r.location);
    if (!prefix)
      throw new OciError(
        'INVALID_CONFIG',
        `${file}: [[registry]] #${i + 1} needs "location" or "prefix"`,
      );
    const wildcard = prefix.startsWith('*.');
    // containers-registries.conf(5): a wildcard names hosts only and takes no location
    if (
      wildcard &&
      (!/^\*(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$/.test(prefix) || r.location)
    ) {
      throw new OciError(
        'INVALID_CONFIG',
        `${file}: wildcard prefix "${prefix}" must be "*." and a host name, without a location`,
      );
    }
    const location = wildcard ? '' : (trim(r.location) ?? prefix);
    const byDigestOnly = r['mirror-by-digest-only'] === true;
    return {
      prefix,
      location,
      insecure: r.insecure === true,
      blocked: r.blocked === true,
      mirrors: (r.mirror ?? []).map((m, j) => {
        if (!m.location)
          throw new OciError(
            'INVALID_CONFIG',
            `${file}: mirror #${j + 1} of "${prefix}" has no location`,
          );
        if (byDigestOnly && m['pull-from-mirror'] !== undefined) {
          throw new OciError(
            'INVALID_CONFIG',
            `${file}: "${prefix}" sets both mirror-by-digest-only and pull-from-mirror; use pull-from-mirror only`,
          );
        }
        const pfm = m['pull-from-mirror'] ?? (byDigestOnly ? 'digest-only' : 'all');
        if (pfm !== 'all' && pfm !== 'digest-only' && pfm !== 'tag-only') {
          throw new OciError(
            'INVALID_CONFIG',
            `${file}: pull-from-mirror must be all, digest-only or tag-only, not "${pfm}"`,
          );
        }
        return { location: trim(m.location)!, insecure: m.insecure === true, pullFromMirror: pfm };
      }),
    };
  });
}

/** How much of "registry/repository" a prefix covers (0: none); "*.example.com" covers a host ending in ".example.com". */
function matchedLength(prefix: string, name: string): number {
  if (prefix.startsWith('*.')) {
    const slash = name.indexOf('/');
    const host = slash < 0 ? name : name.slice(0, slash);
    return host.endsWith(prefix.slice(1)) ? host.length : 0;
  }
  return name === prefix || name.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`)
    ? prefix.length
    : 0;
}

/** Far above any real registries.conf: a larger file is the wrong file, not to be parsed whole. */
export const MAX_REGISTRIES_CONF_BYTES = 1024 * 1024;

/** /dev/null given as the file means no configuration, as for podman. */
async function isDevNull(path: string): Promise<boolean> {
  const [st, nul] = await Promise.all([
    stat(path).catch(() => undefined),
    stat('/dev/null').catch(() => undefined),
  ]);
  return !!st && !!nul && st.isCharacterDevice() && st.rdev === nul.rdev;
}

async function readConf(path: string): Promise<string> {
  if (await isDevNull(path)) return '';
  try {
    return (await readSmallFile(path, MAX_REGISTRIES_CONF_BYTES)).bytes.toString('utf8');
  } catch (cause) {
    throw new OciError(
      'INVALID_CONFIG',
      `cannot read registries config ${path}: ${(cause as Error).message}`,
      { cause },
    );
  }
}

/**
 * containers-registries.conf(5) mirror rules: the longest matching prefix decides, mirrors
 * are tried in order, then the (rewritten) location unless blocked. Drop-ins in a
 * registries.conf.d directory override rules with the same prefix, files in lexical order.
 */
export class RegistriesConf {
  /** `broken`: why the configuration read by default cannot be used, thrown only when a pull needs it. */
  constructor(
    readonly rules: RegistryRule[] = [],
    private readonly broken?: OciError,
  ) {}

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
    try {
      return await RegistriesConf.readSystem(env);
    } catch (cause) {
      // never in the way of a create that pulls nothing from a registry
      const e = cause as Error;
      const how = env[REGISTRIES_CONF_ENV]
        ? `named by ${REGISTRIES_CONF_ENV}`
        : 'read by default, as podman does';
      return new RegistriesConf(
        [],
        new OciError(
          'INVALID_CONFIG',
          `${e.message.replace(/\.$/, '')} (${how}; --registries-conf FILE replaces it, /dev/null for none)`,
          { cause },
        ),
      );
    }
  }

  private static async readSystem(env: NodeJS.ProcessEnv): Promise<RegistriesConf> {
    const etc = join(systemRoot(env), 'etc', 'containers');
    const user = join(env.HOME ?? homedir(), '.config', 'containers');
    const userFile = join(user, 'registries.conf');
    const named = env[REGISTRIES_CONF_ENV];
    const userOwn = !named && (await stat(userFile).catch(() => undefined)) !== undefined;
    const file = named || (userOwn ? userFile : join(etc, 'registries.conf'));
    // a file named (by the variable or by being the user's) must be read; the system's may be absent
    const base =
      named || userOwn || (await stat(file).catch(() => undefined))
        ? await RegistriesConf.load(file)
        : new RegistriesConf();
    const dirs = userOwn
      ? [join(user, 'registries.conf.d')]
      : [join(etc, 'registries.conf.d'), join(user, 'registries.conf.d')];
    let conf = base;
    for (const dir of dirs) conf = await RegistriesConf.loadDir(dir, conf);
    return conf;
  }

  /** The rule whose prefix is the longest match of "registry/repository" at a path boundary, and the matched length. */
  private matching(name: string): { rule: RegistryRule; length: number } | undefined {
    if (this.broken) throw this.broken;
    let best: { rule: RegistryRule; length: number } | undefined;
    for (const rule of this.rules) {
      const length = matchedLength(rule.prefix, name);
      if (length > 0 && (!best || length > best.length)) best = { rule, length };
    }
    return best;
  }

  match(ref: ImageReference): RegistryRule | undefined {
    return this.matching(repositoryName(ref))?.rule;
  }

  /** Where to pull `ref` from, in order. */
  pullSources(ref: ImageReference, defaultInsecure = false): PullSource[] {
    const name = repositoryName(ref);
    const found = this.matching(name);
    const rule = found?.rule;
    const split = (full: string, insecure: boolean, mirror: boolean): PullSource => {
      const slash = full.indexOf('/');
      if (slash < 0)
        throw new OciError(
          'INVALID_CONFIG',
          `registry location "${full}" rewrites "${name}" to a name without a repository`,
        );
      return {
        registry: full.slice(0, slash),
        repository: full.slice(slash + 1),
        insecure,
        mirror,
      };
    };
    if (!rule) return [split(name, defaultInsecure, false)];
    const suffix = name.slice(found!.length);
    const location = rule.location || name.slice(0, found!.length);
    const byDigest = ref.digest !== undefined;
    const out: PullSource[] = [];
    for (const m of rule.mirrors) {
      if (m.pullFromMirror === 'digest-only' && !byDigest) continue;
      if (m.pullFromMirror === 'tag-only' && byDigest) continue;
      out.push(split(m.location + suffix, m.insecure || defaultInsecure, true));
    }
    if (!rule.blocked) out.push(split(location + suffix, rule.insecure || defaultInsecure, false));
    if (out.length === 0)
      throw new OciError(
        'NOT_FOUND',
        `registry "${rule.prefix}" is blocked in registries.conf and no mirror serves ${name}`,
      );
    return out;
  }
}
