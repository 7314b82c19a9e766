/**
 * The ConfigMap the cluster-version operator reads release signatures from on a cluster that
 * cannot reach a signature store, laid out as oc-mirror (v2) writes it
 * (internal/pkg/clusterresources: GenerateSignatureConfigMap): namespace
 * openshift-config-managed, name mirrored-release-signatures, label
 * release.openshift.io/verification-signatures: "", binaryData "sha256-<hex>-<n>" = the
 * signature file's bytes (base64). The CVO matches keys by their "sha256-<hex>-" prefix.
 *
 * Applied by server-side apply with one field manager per release, so the keys of different
 * releases (and oc-mirror's own) live side by side and a later apply drops none of them.
 */
import { apiCall, APPLY_PATCH, requestOptions, type AdminApis } from '@offline-bundle/kube';

export const SIGNATURE_NAMESPACE = 'openshift-config-managed';
export const SIGNATURE_CONFIGMAP = 'mirrored-release-signatures';
export const SIGNATURE_LABEL = 'release.openshift.io/verification-signatures';

export interface SignatureConfigMap {
  apiVersion: 'v1';
  kind: 'ConfigMap';
  metadata: {
    name: string;
    namespace: string;
    labels: Record<string, string>;
    annotations: Record<string, string>;
  };
  binaryData: Record<string, string>;
}

/** binaryData key of signature `n` (from 1) of the release `digest`. */
export const signatureKey = (digest: string, n: number): string =>
  `${digest.replace(':', '-')}-${n}`;

/** The field manager that owns one release's keys. */
export const signatureFieldManager = (digest: string): string =>
  `offline-bundle-${digest.replace(':', '-')}`;

export function signatureConfigMap(
  digest: string,
  signatures: readonly Uint8Array[],
  createdBy = 'offline-bundle',
): SignatureConfigMap {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: SIGNATURE_CONFIGMAP,
      namespace: SIGNATURE_NAMESPACE,
      labels: { [SIGNATURE_LABEL]: '' },
      annotations: { createdBy },
    },
    binaryData: Object.fromEntries(
      signatures.map((s, i) => [signatureKey(digest, i + 1), Buffer.from(s).toString('base64')]),
    ),
  };
}

export async function applySignatureConfigMap(
  apis: AdminApis,
  digest: string,
  cm: SignatureConfigMap,
): Promise<void> {
  await apiCall(`apply ConfigMap ${SIGNATURE_NAMESPACE}/${SIGNATURE_CONFIGMAP}`, () =>
    apis.core.patchNamespacedConfigMap(
      {
        name: SIGNATURE_CONFIGMAP,
        namespace: SIGNATURE_NAMESPACE,
        body: cm,
        fieldManager: signatureFieldManager(digest),
        force: true,
      },
      requestOptions(undefined, APPLY_PATCH),
    ),
  );
}

/** Keys of `cm` missing from the cluster's ConfigMap or different there (empty: prepared). */
export async function missingSignatureKeys(
  apis: AdminApis,
  cm: SignatureConfigMap,
): Promise<string[]> {
  const have = await apiCall(
    `read ConfigMap ${SIGNATURE_NAMESPACE}/${SIGNATURE_CONFIGMAP}`,
    () =>
      apis.core.readNamespacedConfigMap({
        name: SIGNATURE_CONFIGMAP,
        namespace: SIGNATURE_NAMESPACE,
      }),
    { notFound: () => undefined },
  );
  const want = Object.keys(cm.binaryData);
  if (!have || have.metadata?.labels?.[SIGNATURE_LABEL] === undefined) return want;
  return want.filter((k) => have.binaryData?.[k] !== cm.binaryData[k]);
}
