/**
 * The BundleApproval resource (deploy/crd.yaml), read by the agent (which bundles it may fetch
 * from peers) and written by the admin's `bundle cluster approve`: one cluster-scoped object
 * per bundle, named after the sha256 of its signed bundle.json, so approving twice is one
 * object and revoking needs only the digest.
 */
import { ClusterError } from '@offline-bundle/kube';

export const APPROVAL_KIND = 'BundleApproval';
export const APPROVAL_PLURAL = 'bundleapprovals';
/** Bounds shared with deploy/crd.yaml's BundleApproval schema. */
export const APPROVAL_LIMITS = { version: 128, releaseName: 1024 } as const;
const DIGEST = /^sha256:[0-9a-f]{64}$/;

export interface ApprovalSpec {
  /** sha256:… of the bundle's signed bundle.json. */
  manifestDigest: string;
  version: string;
  releaseName?: string;
  /** Fingerprint of the factory key the approval was checked with (or, by digest, named for). */
  signer: string;
  /** file: the command verified the signature with that key; digest: the digest was given by hand. */
  checked: 'file' | 'digest';
  approvedAt?: string;
}

export interface Approval extends ApprovalSpec {
  name: string;
  /** metadata.creationTimestamp, as the API server recorded it. */
  created?: string;
}

/** sha256:HEX → sha256-HEX, the object's name (a DNS-1123 subdomain of 71 characters). */
export function approvalName(manifestDigest: string): string {
  if (!DIGEST.test(manifestDigest))
    throw new ClusterError(
      'INVALID_DIGEST',
      `${JSON.stringify(manifestDigest)} is not a digest: give sha256: and 64 lowercase hex digits (bundle cluster approvals lists them)`,
    );
  return `sha256-${manifestDigest.slice('sha256:'.length)}`;
}

const str = (v: unknown) => (typeof v === 'string' ? v : undefined);
const obj = (v: unknown) =>
  typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {};
const time = (v: unknown) => (v instanceof Date ? v.toISOString() : str(v));

/**
 * An approval as read from the cluster; undefined when it is not one: its digest or signer
 * unreadable, or its name not the one its digest gives (the CRD's rule; an object that breaks
 * it, on a cluster without that validation, approves nothing).
 */
export function pickApproval(item: Record<string, unknown>): Approval | undefined {
  const meta = obj(item.metadata);
  const spec = obj(item.spec);
  const manifestDigest = str(spec.manifestDigest);
  const signer = str(spec.signer);
  const name = str(meta.name);
  if (
    !manifestDigest ||
    !DIGEST.test(manifestDigest) ||
    !signer ||
    !DIGEST.test(signer) ||
    name !== approvalName(manifestDigest)
  )
    return undefined;
  const releaseName = str(spec.releaseName);
  const approvedAt = time(spec.approvedAt);
  const created = time(meta.creationTimestamp);
  return {
    name,
    manifestDigest,
    signer,
    version: (str(spec.version) ?? '').slice(0, APPROVAL_LIMITS.version),
    ...(releaseName ? { releaseName: releaseName.slice(0, APPROVAL_LIMITS.releaseName) } : {}),
    checked: spec.checked === 'file' ? 'file' : 'digest',
    ...(approvedAt ? { approvedAt } : {}),
    ...(created ? { created } : {}),
  };
}
