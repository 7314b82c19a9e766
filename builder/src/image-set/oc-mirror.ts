import { OciError } from '@offline-bundle/oci';
import { plural } from '@offline-bundle/cli';
import { FAT32_MAX_FILE } from '../split.js';
import {
  someProblems,
  type BundleFile,
  type LoadedBundleFile,
  type Locate,
  type OperatorSelection,
  type ReleaseByChannel,
} from './schema.js';

/** oc-mirror v2's ImageSetConfiguration, read as is. */
export const IMAGE_SET_API_VERSION = 'mirror.openshift.io/v2alpha1';
/** oc-mirror v1's, refused with the way to v2. */
export const IMAGE_SET_V1_API_VERSION = 'mirror.openshift.io/v1alpha2';

type Obj = Record<string, unknown>;
type Path = (string | number)[];

/**
 * What each field becomes: read (its value is translated below), ignored with a note, or
 * refused (when it asks for something a bundle does not carry) with what to do instead.
 */
type Rule = { read: true } | { refuse: string; whenEmpty?: 'accept' } | { note: string };

const TOP: Record<string, Rule> = {
  kind: { read: true },
  apiVersion: { read: true },
  mirror: { read: true },
  archiveSize: { read: true },
  delete: {
    refuse: "deleting images is a DeleteImageSetConfiguration's job, not a bundle's: remove it",
  },
};
const MIRROR: Record<string, Rule> = {
  platform: { read: true },
  additionalImages: { read: true },
  operators: { read: true },
  helm: { read: true },
  blockedImages: {
    refuse: 'a bundle carries exactly the images listed, so there is nothing to block: remove it',
    whenEmpty: 'accept',
  },
};
const PLATFORM: Record<string, Rule> = {
  channels: { read: true },
  architectures: { read: true },
  release: { read: true },
  graph: {
    note: 'mirror.platform.graph is not used: "bundle cluster upgrade" points the cluster at the release by digest, no update service needed',
  },
  kubeVirtContainer: {
    refuse:
      'the KubeVirt container disk is not carried: list its image under mirror.additionalImages, or remove it',
    whenEmpty: 'accept',
  },
};
const CHANNEL: Record<string, Rule> = {
  name: { read: true },
  type: { read: true },
  minVersion: { read: true },
  maxVersion: { read: true },
  // with minVersion: every release of the graph's shortest path from it to maxVersion (an EUS-to-EUS upgrade)
  shortestPath: { read: true },
  full: {
    refuse:
      'a bundle carries one release, not a whole channel: give minVersion/maxVersion, or remove it',
    whenEmpty: 'accept',
  },
};

const OPERATOR: Record<string, Rule> = {
  catalog: { read: true },
  packages: { read: true },
  full: { refuse: 'a whole catalog is not carried: name its packages', whenEmpty: 'accept' },
  targetCatalog: { refuse: 'the catalog keeps its name in a bundle: remove it' },
  targetTag: { refuse: 'the catalog keeps its name in a bundle: remove it' },
};
const PACKAGE: Record<string, Rule> = {
  name: { read: true },
  channels: { read: true },
  minVersion: {
    refuse: 'give minVersion per channel (channels: [{name, minVersion, maxVersion}])',
  },
  maxVersion: {
    refuse: 'give maxVersion per channel (channels: [{name, minVersion, maxVersion}])',
  },
  defaultChannel: { refuse: "the catalog's own defaultChannel is used: name channels instead" },
  bundles: {
    refuse: 'bundles are chosen by channel and version: give channels with minVersion/maxVersion',
  },
};
const OPERATOR_CHANNEL: Record<string, Rule> = {
  name: { read: true },
  minVersion: { read: true },
  maxVersion: { read: true },
};
const HELM: Record<string, Rule> = {
  repositories: { read: true },
  local: {
    refuse:
      'a chart file on disk is not carried: push it to a registry (helm push NAME-VERSION.tgz oci://HOST/REPO) and name it under repositories with url: oci://HOST/REPO',
    whenEmpty: 'accept',
  },
};
const HELM_REPOSITORY: Record<string, Rule> = {
  name: { read: true },
  url: { read: true },
  charts: { read: true },
};
const HELM_CHART: Record<string, Rule> = { name: { read: true }, version: { read: true } };

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const isEmpty = (v: unknown) =>
  v === false ||
  v === null ||
  (Array.isArray(v) && v.length === 0) ||
  (isObj(v) && Object.keys(v).length === 0);

class Translation {
  problems: string[] = [];
  warnings: string[] = [];
  constructor(readonly locate: Locate) {}

  /** The object's fields, checked against `rules`: refused and unknown ones become problems. */
  fields(value: unknown, path: Path, rules: Record<string, Rule>): Obj {
    if (!isObj(value)) {
      this.problems.push(`${this.locate(path)}: must be a mapping`);
      return {};
    }
    for (const [key, v] of Object.entries(value)) {
      const rule = Object.hasOwn(rules, key) ? rules[key]! : undefined;
      const at = this.locate([...path, key]);
      if (!rule)
        this.problems.push(
          `${at}: not a field of ${IMAGE_SET_API_VERSION} that bundle knows (known: ${Object.keys(rules).join(', ')})`,
        );
      else if ('refuse' in rule && !(rule.whenEmpty === 'accept' && isEmpty(v)))
        this.problems.push(`${at}: ${rule.refuse}`);
      else if ('note' in rule && !isEmpty(v)) this.warnings.push(`${at}: ${rule.note}`);
    }
    return value;
  }

  text(value: unknown, path: Path): string | undefined {
    if (value === undefined) return undefined;
    if (typeof value === 'string' && value) return value;
    this.problems.push(`${this.locate(path)}: must be a non-empty string`);
    return undefined;
  }

  list(value: unknown, path: Path): unknown[] {
    if (value === undefined || value === null) return [];
    if (Array.isArray(value)) return value;
    this.problems.push(`${this.locate(path)}: must be a list`);
    return [];
  }
}

function channelRelease(tr: Translation, raw: unknown, path: Path): ReleaseByChannel | undefined {
  const c = tr.fields(raw, path, CHANNEL);
  const channel = tr.text(c.name, [...path, 'name']);
  if (c.name === undefined) tr.problems.push(`${tr.locate(path)}: name (the channel) is required`);
  const type = tr.text(c.type, [...path, 'type']);
  if (type !== undefined && type !== 'ocp' && type !== 'okd')
    tr.problems.push(`${tr.locate([...path, 'type'])}: must be ocp or okd`);
  const min = tr.text(c.minVersion, [...path, 'minVersion']);
  const max = tr.text(c.maxVersion, [...path, 'maxVersion']);
  if (!channel) return undefined;
  if (min !== undefined && min === max) return { channel, version: min };
  if (c.shortestPath !== undefined && typeof c.shortestPath !== 'boolean')
    tr.problems.push(`${tr.locate([...path, 'shortestPath'])}: must be true or false`);
  // as oc-mirror: minVersion is where the cluster is, the path's releases after it are carried
  if (c.shortestPath === true && min !== undefined)
    return { channel, from: min, ...(max !== undefined ? { version: max } : {}) };
  const range = [min !== undefined ? `>=${min}` : '', max !== undefined ? `<=${max}` : '']
    .filter(Boolean)
    .join(' ');
  return { channel, ...(range ? { versionRange: range } : {}) };
}

function operators(tr: Translation, raw: unknown): OperatorSelection[] {
  const out: OperatorSelection[] = [];
  for (const [i, rawOp] of tr.list(raw, ['mirror', 'operators']).entries()) {
    const path = ['mirror', 'operators', i];
    const op = tr.fields(rawOp, path, OPERATOR);
    const catalog = tr.text(op.catalog, [...path, 'catalog']);
    const packages = tr.list(op.packages, [...path, 'packages']).map((rawPkg, j) => {
      const pp = [...path, 'packages', j];
      const pkg = tr.fields(rawPkg, pp, PACKAGE);
      const channels = tr.list(pkg.channels, [...pp, 'channels']).map((rawCh, k) => {
        const cp = [...pp, 'channels', k];
        const ch = tr.fields(rawCh, cp, OPERATOR_CHANNEL);
        const min = tr.text(ch.minVersion, [...cp, 'minVersion']);
        const max = tr.text(ch.maxVersion, [...cp, 'maxVersion']);
        return {
          name: tr.text(ch.name, [...cp, 'name']) ?? '',
          ...(min ? { minVersion: min } : {}),
          ...(max ? { maxVersion: max } : {}),
        };
      });
      return {
        name: tr.text(pkg.name, [...pp, 'name']) ?? '',
        ...(channels.length ? { channels } : {}),
      };
    });
    if (!catalog || packages.length === 0)
      tr.problems.push(
        `${tr.locate(path)}: an operator needs catalog and packages (a whole catalog is not carried)`,
      );
    else out.push({ catalog, packages, where: tr.locate(path) });
  }
  return out;
}

/**
 * helm.repositories whose url is oci://HOST/REPO: each chart is oci://HOST/REPO/NAME:VERSION.
 * An HTTP chart repository (index.yaml and .tgz files) is no registry: refused by its url.
 */
function helmCharts(tr: Translation, raw: unknown): { ref: string; where: string }[] {
  const out: { ref: string; where: string }[] = [];
  const helm = tr.fields(raw, ['mirror', 'helm'], HELM);
  for (const [i, rawRepo] of tr
    .list(helm.repositories, ['mirror', 'helm', 'repositories'])
    .entries()) {
    const path = ['mirror', 'helm', 'repositories', i];
    const repo = tr.fields(rawRepo, path, HELM_REPOSITORY);
    const url = tr.text(repo.url, [...path, 'url']);
    if (url === undefined) {
      tr.problems.push(`${tr.locate(path)}: url is required`);
      continue;
    }
    if (!url.startsWith('oci://')) {
      tr.problems.push(
        `${tr.locate([...path, 'url'])}: ${url} is an HTTP chart repository, which is not carried: push its charts to a registry (helm push) and give url: oci://HOST/REPO`,
      );
      continue;
    }
    for (const [j, rawChart] of tr.list(repo.charts, [...path, 'charts']).entries()) {
      const cp = [...path, 'charts', j];
      const chart = tr.fields(rawChart, cp, HELM_CHART);
      const name = tr.text(chart.name, [...cp, 'name']);
      const version = tr.text(chart.version, [...cp, 'version']);
      if (!name || !version)
        tr.problems.push(
          `${tr.locate(cp)}: a chart needs name and version (a bundle carries one version of a chart)`,
        );
      // a version's "+" becomes the tag's "_" where every chart's does (chartSource)
      else out.push({ ref: `${url.replace(/\/+$/, '')}/${name}:${version}`, where: tr.locate(cp) });
    }
  }
  return out;
}

function platform(tr: Translation, raw: unknown, out: BundleFile): void {
  const path = ['mirror', 'platform'];
  const p = tr.fields(raw, path, PLATFORM);
  const channels = tr.list(p.channels, [...path, 'channels']);
  const release = tr.text(p.release, [...path, 'release']);
  if (channels.length > 1)
    tr.problems.push(
      `${tr.locate([...path, 'channels'])}: ${plural(channels.length, 'channel')} give as many releases, and a bundle carries one: keep one channel (a bundle per release)`,
    );
  else if (channels.length === 1 && release !== undefined)
    tr.problems.push(
      `${tr.locate([...path, 'release'])}: give release or channels, not both (a bundle carries one release)`,
    );
  else if (release !== undefined) out.release = release;
  else if (channels.length === 1) {
    const r = channelRelease(tr, channels[0], [...path, 'channels', 0]);
    if (r) out.release = r;
  }
  const arches = tr.list(p.architectures, [...path, 'architectures']);
  if (arches.length > 1 || arches[0] === 'multi')
    tr.problems.push(
      `${tr.locate([...path, 'architectures'])}: a bundle holds one architecture's release: keep one (a bundle per architecture)`,
    );
  else if (arches.length === 1) out.arch = tr.text(arches[0], [...path, 'architectures', 0]);
}

/**
 * The bundle file an ImageSetConfiguration means: platform.release or one channel with
 * minVersion/maxVersion (resolved against --update-graph), platform.architectures, and
 * additionalImages. Everything a bundle does not carry is a problem naming its field; all of
 * them are reported at once.
 */
/**
 * archiveSize: oc-mirror's largest archive, in GiB: create's --split-size (a bundle larger than
 * that is cut into parts; one that fits stays one file). 4 is FAT32's 4 GiB - 1 byte, as 4G is.
 */
function archiveSize(tr: Translation, value: unknown, out: BundleFile): void {
  if (value === undefined || value === null) return;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    tr.problems.push(
      `${tr.locate(['archiveSize'])}: must be a whole number of GiB, 1 or more (oc-mirror's unit), as --split-size ${String(value)}G would be`,
    );
    return;
  }
  const bytes = value * 1024 ** 3;
  out.splitSize = bytes === 4 * 1024 ** 3 ? FAT32_MAX_FILE : bytes;
}

export function translateImageSet(doc: Obj, locate: Locate): LoadedBundleFile {
  const tr = new Translation(locate);
  tr.fields(doc, [], TOP);
  if (doc.kind !== 'ImageSetConfiguration')
    tr.problems.push(
      `${locate(['kind'])}: ${IMAGE_SET_API_VERSION} is read for kind ImageSetConfiguration only`,
    );
  const out: BundleFile = {};
  const imagesWhere: string[] = [];
  const chartsWhere: string[] = [];
  archiveSize(tr, doc.archiveSize, out);
  if (doc.mirror === undefined) tr.problems.push(`${locate([])}: mirror is required`);
  else {
    const mirror = tr.fields(doc.mirror, ['mirror'], MIRROR);
    if (mirror.platform !== undefined) platform(tr, mirror.platform, out);
    const ops = operators(tr, mirror.operators);
    if (ops.length) out.operators = ops;
    const charts =
      mirror.helm === undefined || mirror.helm === null ? [] : helmCharts(tr, mirror.helm);
    if (charts.length) out.charts = charts.map((c) => c.ref);
    chartsWhere.push(...charts.map((c) => c.where));
    for (const [i, raw] of tr
      .list(mirror.additionalImages, ['mirror', 'additionalImages'])
      .entries()) {
      const path = ['mirror', 'additionalImages', i];
      const image = tr.fields(raw, path, { name: { read: true } });
      const ref = tr.text(image.name, [...path, 'name']);
      if (image.name === undefined) tr.problems.push(`${locate(path)}: name is required`);
      if (!ref) continue;
      (out.images ??= []).push(ref);
      imagesWhere.push(locate([...path, 'name']));
    }
  }
  if (
    !out.release &&
    !out.images?.length &&
    !out.operators?.length &&
    !out.charts?.length &&
    !tr.problems.length
  )
    tr.problems.push(
      `${locate(['mirror'])}: nothing a bundle carries: give mirror.platform (release or channels) or mirror.additionalImages`,
    );
  if (tr.problems.length)
    throw new OciError(
      'INVALID_CONFIG',
      `${plural(tr.problems.length, 'field')} of the ImageSetConfiguration cannot be carried, nothing fetched: ${someProblems(tr.problems)}`,
    );
  return {
    file: out,
    imagesWhere,
    chartsWhere,
    releaseWhere: locate([
      'mirror',
      'platform',
      typeof out.release === 'string' ? 'release' : 'channels',
    ]),
    warnings: tr.warnings,
  };
}
