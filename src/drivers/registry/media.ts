/** The media types of the Docker v2 and OCI image formats that forkd reads and writes. */
export const MEDIA = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
} as const;

/** Every manifest type a GET may answer with, for the Accept header. */
export const MANIFEST_TYPES = [
  MEDIA.ociIndex,
  MEDIA.ociManifest,
  MEDIA.dockerList,
  MEDIA.dockerManifest,
];

/** Layer compressions, by layer media type. */
export type Compression = 'none' | 'gzip' | 'zstd';

const LAYER_TYPES: Record<string, Compression> = {
  'application/vnd.oci.image.layer.v1.tar': 'none',
  'application/vnd.oci.image.layer.v1.tar+gzip': 'gzip',
  'application/vnd.oci.image.layer.v1.tar+zstd': 'zstd',
  'application/vnd.oci.image.layer.nondistributable.v1.tar': 'none',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip': 'gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+zstd': 'zstd',
  'application/vnd.docker.image.rootfs.diff.tar': 'none',
  'application/vnd.docker.image.rootfs.diff.tar.gzip': 'gzip',
  'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip': 'gzip',
};

/** The compression of a layer media type, or undefined for one that is no layer forkd knows. */
export function layerCompression(mediaType: string): Compression | undefined {
  return LAYER_TYPES[mediaType];
}

export function isIndex(mediaType: string): boolean {
  return mediaType === MEDIA.ociIndex || mediaType === MEDIA.dockerList;
}

export function isManifest(mediaType: string): boolean {
  return mediaType === MEDIA.ociManifest || mediaType === MEDIA.dockerManifest;
}
