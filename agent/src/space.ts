import { mkdir, stat, statfs } from 'node:fs/promises';
import type { BundleManifest } from '@offline-bundle/format';
import type { AgentConfig } from './config.js';
import { AgentError } from './errors.js';

export type StageMode = 'staged' | 'media';

async function fsInfo(dir: string): Promise<{ free: number; dev: number }> {
  await mkdir(dir, { recursive: true });
  const [fs, st] = await Promise.all([statfs(dir), stat(dir)]);
  return { free: fs.bavail * fs.bsize, dev: st.dev };
}

function gib(n: number): string {
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

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
    return { mode: 'staged', message: `${gib(up.free)} free for ${gib(layout)} of layout and ${gib(images)} of images` };
  }
  if (store.free >= images + reserve) {
    return { mode: 'media', message: `not enough room to copy the bundle (${gib(layout)}); serving from the media: keep the USB stick in until Ready` };
  }
  const missing = images + reserve - store.free;
  throw new AgentError('InsufficientSpace',
    `not enough disk space: the images need ${gib(images)} plus a ${gib(reserve)} reserve in ${config.paths.imageStoreDir}, which has ${gib(store.free)} free; free ${gib(missing)} (e.g. remove unused images) and plug the stick in again`);
}
