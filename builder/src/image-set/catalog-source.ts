import type { BundleImage } from '@offline-bundle/format';

/** The component create gives a catalog image in bundle.json, so the cluster side can find it. */
export const CATALOG_COMPONENT = 'operator-catalog';

/** A DNS-1123 label from a catalog's name: redhat/redhat-operator-index:v4.14 → redhat-operator-index-v4-14. */
function catalogName(img: BundleImage): string {
  const base = `${img.repository.split('/').pop()}${img.tag ? `-${img.tag}` : ''}`;
  return base.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 63).replace(/-+$/, '') || 'catalog';
}

/**
 * The CatalogSource of each catalog image a bundle carries, pointing at it by digest (served
 * from the node's image store, where the bundle loads and pins it). Names are kept in a bundle,
 * so no ImageDigestMirrorSet is needed.
 */
export function catalogSources(images: BundleImage[], namespace: string): object[] {
  return images.filter((i) => i.component === CATALOG_COMPONENT).map((i) => ({
    apiVersion: 'operators.coreos.com/v1alpha1',
    kind: 'CatalogSource',
    metadata: { name: catalogName(i), namespace },
    spec: { sourceType: 'grpc', image: `${i.repository}@${i.digest}`, displayName: `${i.repository}${i.tag ? `:${i.tag}` : ''} (offline bundle)` },
  }));
}
