export const MediaType = {
  OciIndex: 'application/vnd.oci.image.index.v1+json',
  OciManifest: 'application/vnd.oci.image.manifest.v1+json',
  OciConfig: 'application/vnd.oci.image.config.v1+json',
  OciLayerTar: 'application/vnd.oci.image.layer.v1.tar',
  OciLayerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  OciLayerZstd: 'application/vnd.oci.image.layer.v1.tar+zstd',
  DockerManifestList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  DockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  DockerConfig: 'application/vnd.docker.container.image.v1+json',
  DockerLayerGzip: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
  DockerLayerTar: 'application/vnd.docker.image.rootfs.diff.tar',
} as const;

const INDEX_MEDIA_TYPES: readonly string[] = [MediaType.OciIndex, MediaType.DockerManifestList];
const MANIFEST_MEDIA_TYPES: readonly string[] = [MediaType.OciManifest, MediaType.DockerManifest];
/** What we send as Accept when fetching a manifest: every type we can store and serve. */
export const MANIFEST_ACCEPT = [...INDEX_MEDIA_TYPES, ...MANIFEST_MEDIA_TYPES].join(', ');

export function isIndexMediaType(mediaType: string): boolean {
  return INDEX_MEDIA_TYPES.includes(mediaType);
}
export function isManifestMediaType(mediaType: string): boolean {
  return MANIFEST_MEDIA_TYPES.includes(mediaType);
}
