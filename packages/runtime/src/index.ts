export { RuntimeError } from './errors.js';
export { MANAGED_MARKER } from './files.js';
export { renderRegistriesDropIn, writeRegistriesDropIn, removeDropIn } from './registries.js';
export { renderPinsDropIn, writePinsDropIn, readPinsDropIn } from './pins.js';
export {
  containerdHostDir,
  renderContainerdHosts,
  writeContainerdHosts,
  removeContainerdHosts,
} from './containerd-hosts.js';
export { CriImageClient, CRI_PROTO_PATH } from './cri-client.js';
export { pullAll } from './pull-all.js';
export { watchStalls } from './stall-watch.js';
export { ContainerdImagesClient, type ContainerdImageRecord } from './containerd-images.js';
export {
  pinContainerdImages,
  setContainerdPins,
  containerdPinnedRefs,
  CONTAINERD_PIN_LABEL,
  CONTAINERD_PIN_VALUE,
} from './containerd-pin.js';
export { reloadRuntime } from './reload.js';
export {
  containerdVersion,
  containerdReportsPins,
  CONTAINERD_VERSION_PROTO_PATH,
} from './containerd-version.js';
export {
  criStatusInfo,
  registryConfigPath,
  configPathReads,
  hostPath,
  CRI_RUNTIME_PROTO_PATH,
} from './containerd-config.js';

export type { RuntimeErrorCode } from './errors.js';
export type { MirroredRepository, RegistriesDropInSpec } from './registries.js';
export type {
  CriImage,
  CriImageClientOptions,
  FilesystemUsage,
  ImageFsInfo,
  ImagePuller,
  PullImageOptions,
} from './cri-client.js';
export type { PullAllOptions, PullProgress, PullResult } from './pull-all.js';
export type { PullActivity, StallWatchOptions } from './stall-watch.js';
export type { ContainerdPinOptions } from './containerd-pin.js';
export type { ReloadOptions } from './reload.js';
