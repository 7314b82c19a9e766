import { filesystemFree as fsInfo } from '@offline-bundle/host';
import type { BundleManifest } from '@offline-bundle/format';
import { formatBytes, type BundleMode } from '@offline-bundle/status';
import type { AgentConfig } from '../config.js';
import { AgentError } from '../errors.js';

/** The status model's bundle mode: one list of modes for the status, the CRD and the planner. */
export type StageMode = BundleMode;

/**
 * Chooses where the layout goes: staged on disk when both it and the unpacked images fit
 * (with the reserve), else served from the media when the images alone fit, else refuse,
 * naming the bytes missing. Filesystems are told apart by device, so a shared one counts once.
 */
export async function planSpace(m: BundleManifest, config: AgentConfig): Promise<{ mode: StageMode; message: string }> {
  const up = await fsInfo(config.paths.upgradeDir);
  const store = await fsInfo(config.paths.imageStoreDir);
  const reserve = config.space.reserveBytes;
  const layout = m.totals.layoutBytes;
  const images = m.totals.imageStoreBytes;
  const shared = up.dev === store.dev;
  const stagedFits = shared ? up.free >= layout + images + reserve : up.free >= layout + reserve && store.free >= images + reserve;
  if (stagedFits) {
    return { mode: 'staged', message: `${formatBytes(up.free)} free for ${formatBytes(layout)} of layout and ${formatBytes(images)} of images` };
  }
  if (store.free >= images + reserve) {
    return { mode: 'media', message: `not enough room to copy the bundle (${formatBytes(layout)}); serving from the media: keep the USB stick in until Ready` };
  }
  const missing = images + reserve - store.free;
  throw new AgentError('InsufficientSpace',
    `not enough disk space: the images need ${formatBytes(images)} plus a ${formatBytes(reserve)} reserve in ${config.paths.imageStoreDir}, which has ${formatBytes(store.free)} free; free ${formatBytes(missing)} (e.g. remove unused images) and plug the stick in again`);
}
