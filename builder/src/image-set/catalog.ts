/**
 * Operator catalogs (#23 item 2): an OLM catalog image holds a file-based catalog (FBC), the
 * declarative config under the directory its label names: olm.package, olm.channel and
 * olm.bundle objects, as a stream of JSON objects or YAML documents per file. A selection names
 * packages and channels (and a version range); the images a bundle needs are each selected
 * operator bundle's image and its relatedImages.
 */
import { readFile } from 'node:fs/promises';
import { parseAllDocuments } from 'yaml';
import { maxSatisfying, satisfies, valid } from 'semver';
import { OciError, parseReference } from '@offline-bundle/oci';
import { readLayerFiles, type LayerReader } from '@offline-bundle/openshift-release';
import {
  HostError,
  assertNesting,
  assertValueNesting,
  escapeControls,
  quoteName,
} from '@offline-bundle/host';
import { formatBytes } from '@offline-bundle/cli';
import { someOf, type OperatorSelection } from './schema.js';

/** The label of a catalog image naming its FBC directory (opm's default /configs). */
const CONFIGS_LABEL = 'operators.operatorframework.io.index.configs.v1';

interface ChannelSelection {
  name: string;
  minVersion?: string;
  maxVersion?: string;
}
interface PackageSelection {
  name: string;
  channels?: ChannelSelection[];
}

interface FbcBundle {
  name: string;
  package: string;
  image: string;
  version: string;
  relatedImages: string[];
}
interface FbcChannel {
  package: string;
  name: string;
  entries: { name: string; replaces?: string; skips?: string[] }[];
}
interface Fbc {
  packages: Map<string, { defaultChannel?: string }>;
  channels: FbcChannel[];
  bundles: Map<string, FbcBundle>;
}

/** The JSON objects of an FBC .json file: opm writes them one after another, not as an array. */
function jsonObjects(text: string, file: string): unknown[] {
  const out: unknown[] = [];
  let depth = 0;
  let start = -1;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{' || c === '[') {
      if (depth++ === 0) start = i;
    } else if (c === '}' || c === ']') {
      if (--depth === 0) out.push(JSON.parse(text.slice(start, i + 1)));
      if (depth < 0) throw new OciError('INVALID_CONFIG', `${quoteName(file)}: unbalanced JSON`);
    } else if (depth === 0 && c !== ' ' && c !== '\n' && c !== '\r' && c !== '\t')
      throw new OciError(
        'INVALID_CONFIG',
        `${quoteName(file)}: ${quoteName(c!)} between JSON objects`,
      );
  }
  if (depth !== 0)
    throw new OciError('INVALID_CONFIG', `${quoteName(file)}: a JSON object is not closed`);
  return out;
}

function documents(name: string, bytes: Buffer): unknown[] {
  const text = bytes.toString('utf8');
  // third-party content: the yaml library recurses per level (a 64 KB `[[[[…` aborts it)
  assertNesting(text, name.endsWith('.json') ? 'json' : 'yaml', quoteName(name));
  if (name.endsWith('.json')) return jsonObjects(text, name);
  return parseAllDocuments(text).map((d) => {
    if (d.errors.length)
      throw new OciError(
        'INVALID_CONFIG',
        `${quoteName(name)} is not valid YAML: ${d.errors[0]!.message.split('\n')[0]}`,
      );
    const value: unknown = d.toJS({ maxAliasCount: 100 });
    // an alias stands for its anchor's whole depth, which the text scan above does not see
    assertValueNesting(value, quoteName(name));
    return value;
  });
}

type Obj = Record<string, unknown>;
const str = (v: unknown) => (typeof v === 'string' ? v : undefined);

function bundleOf(o: Obj, file: string): FbcBundle {
  const name = str(o.name);
  const pkg = str(o.package);
  const image = str(o.image);
  const props = Array.isArray(o.properties) ? (o.properties as Obj[]) : [];
  const version = str(
    (props.find((p) => p?.type === 'olm.package')?.value as Obj | undefined)?.version,
  );
  if (!name || !pkg || !image || !version || !valid(version))
    throw new OciError(
      'INVALID_CONFIG',
      `${quoteName(file)}: olm.bundle ${quoteName(name ?? '?')} needs name, package, image and an olm.package property with a semver version`,
    );
  const related = Array.isArray(o.relatedImages)
    ? (o.relatedImages as Obj[]).map((r) => str(r?.image)).filter((x): x is string => !!x)
    : [];
  return { name, package: pkg, image, version, relatedImages: related };
}

/** The catalog's packages, channels and bundles from its FBC files (path → bytes). */
function parseCatalog(files: ReadonlyMap<string, Buffer>): Fbc {
  const fbc: Fbc = { packages: new Map(), channels: [], bundles: new Map() };
  for (const [file, bytes] of [...files].sort(([a], [b]) => (a < b ? -1 : 1))) {
    for (const raw of documents(file, bytes)) {
      const o = (raw ?? {}) as Obj;
      if (o.schema === 'olm.package' && str(o.name))
        fbc.packages.set(o.name as string, {
          ...(str(o.defaultChannel) ? { defaultChannel: o.defaultChannel as string } : {}),
        });
      else if (o.schema === 'olm.channel' && str(o.package) && str(o.name)) {
        const entries = (Array.isArray(o.entries) ? (o.entries as Obj[]) : [])
          .filter((e) => str(e?.name))
          .map((e) => ({
            name: e.name as string,
            ...(str(e.replaces) ? { replaces: e.replaces as string } : {}),
            ...(Array.isArray(e.skips)
              ? { skips: (e.skips as unknown[]).filter((s): s is string => typeof s === 'string') }
              : {}),
          }));
        fbc.channels.push({ package: o.package as string, name: o.name as string, entries });
      } else if (o.schema === 'olm.bundle') {
        const b = bundleOf(o, file);
        fbc.bundles.set(b.name, b);
      }
    }
  }
  return fbc;
}

/** The channel's head: the entry no other entry replaces or skips (the newest, should there be several). */
function channelHead(ch: FbcChannel, fbc: Fbc, where: string): string {
  const superseded = new Set(
    ch.entries.flatMap((e) => [...(e.replaces ? [e.replaces] : []), ...(e.skips ?? [])]),
  );
  const heads = ch.entries.map((e) => e.name).filter((n) => !superseded.has(n));
  if (heads.length === 0)
    throw new OciError(
      'INVALID_CONFIG',
      `${where}: channel ${ch.name} of ${ch.package} has no head: each of its entries is replaced or skipped by another (a cycle in the catalog); give minVersion/maxVersion or another channel`,
    );
  const versions = new Map(heads.map((h) => [fbc.bundles.get(h)?.version ?? '0.0.0', h]));
  return versions.get(maxSatisfying([...versions.keys()], '*') ?? '') ?? heads[0]!;
}

function inChannel(fbc: Fbc, pkg: string, sel: ChannelSelection, where: string): FbcBundle[] {
  const ch = fbc.channels.find((c) => c.package === pkg && c.name === sel.name);
  if (!ch || ch.entries.length === 0) {
    const have = fbc.channels
      .filter((c) => c.package === pkg)
      .map((c) => c.name)
      .sort();
    throw new OciError(
      'NOT_FOUND',
      `${where}: package ${pkg} has no channel ${sel.name} (it has: ${someOf(have) || 'none'})`,
    );
  }
  const bundle = (name: string) => {
    const b = fbc.bundles.get(name);
    if (!b)
      throw new OciError(
        'INVALID_CONFIG',
        `${where}: channel ${sel.name} of ${pkg} names bundle ${name}, which the catalog does not hold`,
      );
    return b;
  };
  if (sel.minVersion === undefined && sel.maxVersion === undefined)
    return [bundle(channelHead(ch, fbc, where))];
  const range = [
    sel.minVersion !== undefined ? `>=${sel.minVersion}` : '',
    sel.maxVersion !== undefined ? `<=${sel.maxVersion}` : '',
  ]
    .filter(Boolean)
    .join(' ');
  const chosen = ch.entries.map((e) => bundle(e.name)).filter((b) => satisfies(b.version, range));
  if (chosen.length === 0)
    throw new OciError(
      'NOT_FOUND',
      `${where}: no bundle of ${pkg} in channel ${sel.name} is in ${range} (it has ${someOf(ch.entries.map((e) => bundle(e.name).version))})`,
    );
  return chosen;
}

/** The bundles a selection names: per package its channels (default: the default channel), per channel its head or the versions in range. */
function selectBundles(fbc: Fbc, packages: PackageSelection[], where: string): FbcBundle[] {
  const out = new Map<string, FbcBundle>();
  for (const p of packages) {
    const pkg = fbc.packages.get(p.name);
    if (!pkg)
      throw new OciError(
        'NOT_FOUND',
        `${where}: the catalog has no package ${p.name} (it has: ${someOf([...fbc.packages.keys()].sort()) || 'none'})`,
      );
    const channels = p.channels?.length
      ? p.channels
      : pkg.defaultChannel
        ? [{ name: pkg.defaultChannel }]
        : [];
    if (channels.length === 0)
      throw new OciError(
        'INVALID_CONFIG',
        `${where}: package ${p.name} has no defaultChannel: name its channels`,
      );
    for (const c of channels) for (const b of inChannel(fbc, p.name, c, where)) out.set(b.name, b);
  }
  return [...out.values()];
}

/** The FBC files of a catalog image under the directory its label names, those `keep` takes (by path below it). */
async function readCatalogFiles(
  labels: Record<string, string> | undefined,
  layers: LayerReader[],
  image: string,
  keep: (path: string) => boolean = () => true,
): Promise<Map<string, Buffer>> {
  const dir = (labels?.[CONFIGS_LABEL] ?? '/configs').replace(/^\/+|\/+$/g, '');
  return readLayerFiles(
    layers,
    (name) =>
      name.startsWith(`${dir}/`) &&
      /\.(json|ya?ml)$/.test(name) &&
      keep(name.slice(dir.length + 1)),
    image,
  );
}

/**
 * The catalog as far as the selection needs it. opm lays out a directory per package: the
 * top-level files and the selected packages' ones are read first (a big catalog need not be held whole), the whole
 * catalog only when a package is not in its own directory.
 */
async function catalogFor(
  sel: OperatorSelection,
  labels: Record<string, string> | undefined,
  layers: LayerReader[],
): Promise<Fbc> {
  const selected = new Set(sel.packages.map((p) => p.name));
  const parseFbc = (files: ReadonlyMap<string, Buffer>) => {
    try {
      return parseCatalog(files);
    } catch (cause) {
      if (cause instanceof OciError)
        throw new OciError(cause.code, `${sel.where}: catalog ${sel.catalog}: ${cause.message}`, {
          cause,
        });
      if (cause instanceof HostError)
        throw new HostError(cause.code, `${sel.where}: catalog ${sel.catalog}: ${cause.message}`, {
          cause,
        });
      throw cause;
    }
  };
  const some = parseFbc(
    await readCatalogFiles(
      labels,
      layers,
      sel.catalog,
      (path) => !path.includes('/') || selected.has(path.split('/')[0]!),
    ),
  );
  if ([...selected].every((p) => some.packages.has(p))) return some;
  const files = await readCatalogFiles(labels, layers, sel.catalog);
  if (files.size === 0)
    throw new OciError(
      'INVALID_CONFIG',
      `${sel.where}: ${sel.catalog} holds no file-based catalog under /${(labels?.[CONFIGS_LABEL] ?? '/configs').replace(/^\/+|\/+$/g, '')}: is it an operator catalog image (opm, FBC)?`,
    );
  return parseFbc(files);
}

/** Every image the selected bundles need, each once: the bundle images and their relatedImages, each checked to be an image reference. */
export function bundleImages(
  bundles: FbcBundle[],
  where = 'the catalog',
): { image: string; from: string }[] {
  const out = new Map<string, string>();
  const add = (image: string, from: string, b: FbcBundle) => {
    if (out.has(image)) return;
    try {
      parseReference(image);
    } catch (cause) {
      // parseReference's message quotes the reference as this one does: not twice
      const prefix = `invalid image reference ${quoteName(image)}: `;
      const why = (cause as Error).message;
      throw new OciError(
        'INVALID_CONFIG',
        `${where}: package ${b.package}, bundle ${b.name}: ${from} ${quoteName(image)} is not an image reference (${why.startsWith(prefix) ? why.slice(prefix.length) : why}): the catalog is broken, fix or leave out the package`,
        { cause },
      );
    }
    out.set(image, from);
  };
  for (const b of bundles) {
    add(b.image, `bundle ${b.name}`, b);
    for (const r of b.relatedImages) add(r, `a related image of ${b.name}`, b);
  }
  return [...out].map(([image, from]) => ({ image, from }));
}

/** A catalog is pulled from a registry: a path (oc-mirror's oci://) or a bad name is refused before anything is fetched. */
export function checkCatalogReference(sel: OperatorSelection): void {
  if (
    /^(oci|oci-archive|docker-archive|dir|containers-storage):|^[a-z][a-z0-9+.-]*:\/\//.test(
      sel.catalog,
    )
  ) {
    throw new OciError(
      'INVALID_CONFIG',
      `${sel.where}: catalog "${sel.catalog}" is not in a registry; a catalog is read from one: push it (skopeo copy oci:DIR:TAG docker://HOST/REPO:TAG) and name HOST/REPO:TAG`,
    );
  }
  try {
    parseReference(sel.catalog);
  } catch (cause) {
    throw new OciError('INVALID_CONFIG', `${sel.where}: catalog: ${(cause as Error).message}`, {
      cause,
    });
  }
}

/** A catalog image as create resolved it (it goes into the bundle too): its blobs and a way to their bytes. */
interface OpenedCatalog {
  blobs: { digest: string; size: number; mediaType: string }[];
  /** Its layers, read from the cache (a damaged copy is dropped from it). */
  layers: LayerReader[];
  /** The cache file holding a blob, fetched when missing. */
  blobPath(blob: { digest: string; size: number }): Promise<string>;
}

const isConfig = (mediaType: string) =>
  /image\.config\.v1\+json$|container\.image\.v1\+json$/.test(mediaType);

/**
 * The images the operators of `selections` need, each as an image source line naming where it
 * comes from ("bundle.yaml:9 (operators[0]): a related image of foo.v1.2.0"). `open` resolves
 * a catalog image for the bundle; `warn` gets each catalog's size, carried whole.
 */
export async function operatorImages(
  selections: OperatorSelection[],
  open: (spec: string, where: string) => Promise<OpenedCatalog>,
  warn: (catalog: string, message: string) => void,
): Promise<{ spec: string; where: string }[]> {
  const lines: { spec: string; where: string }[] = [];
  for (const sel of selections) checkCatalogReference(sel);
  for (const sel of selections) {
    const c = await open(`docker://${sel.catalog}`, sel.where);
    const config = c.blobs.find((b) => isConfig(b.mediaType));
    const labels = config
      ? (
          JSON.parse(await readFile(await c.blobPath(config), 'utf8')) as {
            config?: { Labels?: Record<string, string> };
          }
        ).config?.Labels
      : undefined;
    const fbc = await catalogFor(sel, labels, c.layers);
    const bundles = selectBundles(fbc, sel.packages, sel.where);
    // the issue allows the original catalog "with a warning about its size": its blobs, manifest to layers
    const size = formatBytes(c.blobs.reduce((sum, b) => sum + b.size, 0));
    warn(
      sel.catalog,
      `${escapeControls(bundles.map((b) => b.name).join(', '))} selected, the catalog not trimmed to them (the catalog image is carried whole: ${size})`,
    );
    for (const i of bundleImages(bundles, `${sel.where}: catalog ${sel.catalog}`))
      lines.push({ spec: `docker://${i.image}`, where: `${sel.where}: ${i.from}` });
  }
  return lines;
}
