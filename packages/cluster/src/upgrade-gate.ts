/**
 * The UpgradeGate "cluster" (deploy/crd.yaml) that deploy/upgrade-gate.yaml's admission policy
 * takes as its parameter: the admin's commands write what the roll-up found, so the cluster
 * itself refuses a ClusterVersion desiredUpdate the nodes are not ready for, whoever asks
 * (`oc adm upgrade` included). Kubernetes CEL has no clock, so the gate is only as fresh as the
 * last command that wrote it; `upgrade` writes it again just before it changes desiredUpdate.
 */
import { GROUP, truncate, VERSION } from '@offline-bundle/status';
import {
  apiCall,
  APPLY_PATCH,
  isApiException,
  requestOptions,
  type AdminApis,
} from '@offline-bundle/kube';
import type { Rollup } from './cluster-rollup.js';

export const GATE_NAME = 'cluster';
export const GATE_PLURAL = 'upgradegates';
export const GATE_KIND = 'UpgradeGate';
/** The ClusterVersion annotation that waives the gate for the one target it names. */
export const GATE_WAIVER = 'offline-bundle.io/skip-upgrade-gate';
/** The field manager of what the admin's commands apply (the gate, PinnedImageSets). */
export const ADMIN_FIELD_MANAGER = 'offline-bundle-admin';
/** Releases a gate's path names at most: format's MAX_RELEASE_PATH_HOPS (deploy/crd.yaml's maxItems). */
const MAX_GATE_PATH = 4;

export interface GateSpec {
  ready: boolean;
  version?: string;
  image?: string;
  /** An update path's releases, the final one (`version`, `image`) last: each is let through once the nodes are ready (they hold the one bundle that carries them all). */
  path?: GateRelease[];
  bundleDigest?: string;
  summary: string;
  checkedAt: string;
  checkedBy: string;
}

interface GateRelease {
  version: string;
  image: string;
}

export type GateResult = { written: true; spec: GateSpec } | { written: false; why: string };

interface GateOptions {
  /** The command writing it, e.g. "bundle cluster status". */
  by: string;
  /** The bundle's release, when the command read the bundle file: its version and its image by digest. */
  release?: GateRelease & { path?: GateRelease[] };
  now?: Date;
}

/** What the roll-up says, as the gate's spec; the image only for the version every node holds. */
export function gateSpec(r: Rollup, opts: GateOptions, kept?: Partial<GateSpec>): GateSpec {
  const version = r.digest
    ? r.rows.find((x) => x.digest === r.digest && x.version)?.version
    : undefined;
  const sameBundle = kept?.bundleDigest === r.digest && kept?.version === version;
  const fromFile = opts.release && opts.release.version === version;
  const image = fromFile ? opts.release!.image : sameBundle ? kept?.image : undefined;
  const path = fromFile ? opts.release!.path : sameBundle ? kept?.path : undefined;
  return {
    ready: r.ready && version !== undefined,
    ...(version ? { version } : {}),
    ...(image ? { image } : {}),
    ...(path?.length ? { path } : {}),
    ...(r.digest ? { bundleDigest: r.digest } : {}),
    summary: truncate(r.summary, 1024),
    checkedAt: (opts.now ?? new Date()).toISOString(),
    checkedBy: opts.by,
  };
}

const str = (v: unknown) => (typeof v === 'string' ? v : undefined);

/** A gate's path as read back: kept only whole and well-formed (the CRD bounds it at MAX_GATE_PATH). */
export function gatePath(v: unknown): GateRelease[] | undefined {
  if (!Array.isArray(v) || v.length === 0 || v.length > MAX_GATE_PATH) return undefined;
  const out = v.map((x) => ({
    version: str((x as Record<string, unknown>)?.version),
    image: str((x as Record<string, unknown>)?.image),
  }));
  return out.every((x) => x.version && x.image) ? (out as GateRelease[]) : undefined;
}

/**
 * Writes the gate from `r` (server-side apply). A cluster without the CRD, or an admin without
 * the right (deploy/admin-rbac.yaml), is told why and nothing else fails: the gate is the
 * cluster's check, the command's own check stands either way.
 */
export async function publishGate(
  apis: AdminApis,
  r: Rollup,
  opts: GateOptions,
): Promise<GateResult> {
  const at = { group: GROUP, version: VERSION, plural: GATE_PLURAL, name: GATE_NAME };
  try {
    const cur = (await apis.custom.getClusterCustomObject(at).catch((err: unknown) => {
      if (isApiException(err) && err.code === 404) return undefined;
      throw err;
    })) as { spec?: Record<string, unknown> } | undefined;
    const kept = {
      bundleDigest: str(cur?.spec?.bundleDigest),
      version: str(cur?.spec?.version),
      image: str(cur?.spec?.image),
      path: gatePath(cur?.spec?.path),
    };
    const spec = gateSpec(r, opts, kept);
    const body = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: GATE_KIND,
      metadata: { name: GATE_NAME, labels: { 'app.kubernetes.io/part-of': 'offline-bundle' } },
      spec,
    };
    await apis.custom.patchClusterCustomObject(
      { ...at, body, fieldManager: ADMIN_FIELD_MANAGER, force: true },
      requestOptions(undefined, APPLY_PATCH),
    );
    return { written: true, spec };
  } catch (err) {
    if (isApiException(err) && err.code === 404)
      return {
        written: false,
        why: `the cluster has no ${GATE_KIND} resource: apply deploy/crd.yaml and deploy/upgrade-gate.yaml to have the cluster refuse an upgrade the nodes are not ready for`,
      };
    if (isApiException(err) && err.code === 403)
      return {
        written: false,
        why: `not allowed to write ${GATE_PLURAL}.${GROUP} "${GATE_NAME}": bind deploy/admin-rbac.yaml's offline-bundle-admin role`,
      };
    return apiCall(`apply ${GATE_PLURAL}.${GROUP} "${GATE_NAME}"`, () => Promise.reject(err));
  }
}

/** One line on the gate for the admin. */
export function gateLine(g: GateResult): string {
  if (!g.written) return `upgrade gate not written: ${g.why}`;
  const s = g.spec;
  if (!s.ready)
    return 'upgrade gate: closed (the cluster refuses a new desiredUpdate until every node is ready)';
  if (s.path)
    return `upgrade gate: open for the path ${s.path.map((x) => x.version).join(' → ')} (each release by its image digest)`;
  return `upgrade gate: open for ${s.version}${s.image ? ` (${s.image})` : ' (by version; run "bundle cluster prepare BUNDLE" for oc adm upgrade --to-image)'}`;
}
