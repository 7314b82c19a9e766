import { createHash } from 'node:crypto';
import { OPERATOR_CATALOG_COMPONENT, type BundleImage } from '@offline-bundle/format';

/** The component create gives a catalog image in bundle.json, so the cluster side can find it (the format knows it: no release's payload lists it). */
export const CATALOG_COMPONENT = OPERATOR_CATALOG_COMPONENT;

/**
 * A DNS-1123 label from a catalog's name, with a short hash of its full reference: two catalogs
 * of the same last path segment and tag (redhat/operator-index:v4.14, certified/operator-index:v4.14)
 * get different names, and a catalog the same name in every bundle that carries it.
 */
function catalogName(img: BundleImage): string {
  const reference = `${img.repository}${img.tag ? `:${img.tag}` : ''}`;
  const hash = createHash('sha256').update(reference).digest('hex').slice(0, 8);
  const base = `${img.repository.split('/').pop()}${img.tag ? `-${img.tag}` : ''}`;
  const readable =
    base
      .toLowerCase()
      .replace(/[^a-z0-9-]+/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 63 - 9)
      .replace(/-+$/, '') || 'catalog';
  return `${readable}-${hash}`;
}

/**
 * The CatalogSource of each catalog image a bundle carries, pointing at it by digest (served
 * from the node's image store, where the bundle loads and pins it). Names are kept in a bundle,
 * so no ImageDigestMirrorSet is needed.
 */
export function catalogSources(images: BundleImage[], namespace: string): object[] {
  return images
    .filter((i) => i.component === CATALOG_COMPONENT)
    .map((i) => ({
      apiVersion: 'operators.coreos.com/v1alpha1',
      kind: 'CatalogSource',
      metadata: { name: catalogName(i), namespace },
      spec: {
        sourceType: 'grpc',
        image: `${i.repository}@${i.digest}`,
        displayName: `${i.repository}${i.tag ? `:${i.tag}` : ''} (offline bundle)`,
      },
    }));
}
