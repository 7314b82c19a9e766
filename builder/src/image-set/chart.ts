import {
  OciError,
  formatReference,
  parseManifest,
  parseOciUrlReference,
  parseReference,
  type ImageReference,
} from '@offline-bundle/oci';
import { type SourceSpec } from '@offline-bundle/image-fetch';

/** Helm's OCI media types (helm.sh/docs/topics/registries): what makes an artifact a chart. */
export const HELM_CONFIG_MEDIA_TYPE = 'application/vnd.cncf.helm.config.v1+json';
const HELM_CHART_MEDIA_TYPE = 'application/vnd.cncf.helm.chart.content.v1.tar+gzip';
const HELM_PROVENANCE_MEDIA_TYPE = 'application/vnd.cncf.helm.chart.provenance.v1.prov';

/** A chart as the file or --chart names it, and where; `source` is what fetches it. */
export interface ChartLine {
  source: SourceSpec;
  where: string;
}

/**
 * A chart version as its OCI tag: `helm push` writes SemVer build metadata's "+" as "_" (a tag
 * has no "+"), so 0.1.0+build is pulled as 0.1.0_build. Every chart input goes through here.
 */
function helmTag(ref: string): string {
  const at = ref.indexOf('@');
  const name = at >= 0 ? ref.slice(0, at) : ref;
  const colon = name.lastIndexOf(':');
  if (colon <= name.lastIndexOf('/')) return ref;
  return (
    name.slice(0, colon + 1) +
    name.slice(colon + 1).replace(/\+/g, '_') +
    (at >= 0 ? ref.slice(at) : '')
  );
}

/**
 * `oci://HOST/REPO/NAME:VERSION` (as helm push prints it) or `HOST/REPO/NAME:VERSION`, by tag
 * or digest: the docker source that fetches it. An oci:// name is read as Helm reads it, its
 * first component the host always; a bare one as --image's. A chart is read from a registry
 * only, and with a version: a chart's "latest" is no tag helm writes.
 */
export function chartSource(ref: string, where: string): SourceSpec {
  const isUrl = ref.startsWith('oci://');
  const bare = helmTag(ref.replace(/^oci:\/\//, ''));
  if (
    /^[a-z][a-z0-9+.-]*:\/\//.test(bare) ||
    /^(oci|oci-archive|docker-archive|dir|docker|containers-storage):/.test(bare)
  ) {
    throw new OciError(
      'INVALID_CONFIG',
      `${where}: chart "${ref}" is not an OCI reference; a chart is pulled from a registry: push it (helm push NAME-VERSION.tgz oci://HOST/REPO) and name oci://HOST/REPO/NAME:VERSION`,
    );
  }
  let parsed: ImageReference;
  try {
    parsed = isUrl ? parseOciUrlReference(bare) : parseReference(bare);
  } catch (cause) {
    throw new OciError('INVALID_CONFIG', `${where}: chart: ${(cause as Error).message}`, { cause });
  }
  if (!parsed.digest && !/:[^/]+$/.test(bare.split('@')[0]!)) {
    throw new OciError(
      'INVALID_CONFIG',
      `${where}: chart "${ref}" names no version: give oci://HOST/REPO/NAME:VERSION (or @sha256:...)`,
    );
  }
  return { transport: 'docker', target: formatReference(parsed), raw: ref, reference: parsed };
}

/**
 * A chart's manifest held to Helm's shape: an image manifest whose config is Helm's, one chart
 * layer and at most one provenance file. Nothing else is carried as a chart: it would be served
 * under a chart's name with content no helm reads. Neither config nor layer is parsed here.
 */
export function checkChartManifest(bytes: Buffer, mediaType: string, name: string): void {
  const parsed = parseManifest(bytes, mediaType);
  if (parsed.kind !== 'manifest')
    throw new OciError(
      'UNSUPPORTED_MEDIA_TYPE',
      `${name} is an image index, not a Helm chart: list it under images`,
    );
  const { config, layers } = parsed.manifest;
  if (config.mediaType !== HELM_CONFIG_MEDIA_TYPE)
    throw new OciError(
      'UNSUPPORTED_MEDIA_TYPE',
      `${name} is not a Helm chart (its config is ${config.mediaType}, not ${HELM_CONFIG_MEDIA_TYPE}): list it under images`,
    );
  const count = (type: string) => layers.filter((l) => l.mediaType === type).length;
  const other = layers.find(
    (l) => l.mediaType !== HELM_CHART_MEDIA_TYPE && l.mediaType !== HELM_PROVENANCE_MEDIA_TYPE,
  );
  if (other)
    throw new OciError(
      'UNSUPPORTED_MEDIA_TYPE',
      `${name}: a Helm chart's layers are its ${HELM_CHART_MEDIA_TYPE} and an optional provenance file, not ${other.mediaType}`,
    );
  if (count(HELM_CHART_MEDIA_TYPE) !== 1 || count(HELM_PROVENANCE_MEDIA_TYPE) > 1) {
    throw new OciError(
      'UNSUPPORTED_MEDIA_TYPE',
      `${name}: a Helm chart has one chart layer and at most one provenance file; it has ${count(HELM_CHART_MEDIA_TYPE)} and ${count(HELM_PROVENANCE_MEDIA_TYPE)}`,
    );
  }
}
