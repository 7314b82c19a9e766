// Parts of two bundles of one name split at one size pass every check by names and sizes. Once
// the spool holds them all, the seek table at the bundle's end lists where every zstd frame
// starts: each of those offsets must hold a frame's magic number. A part of another bundle
// breaks that at once, and is named here, before the load reads a byte of it.
import { misplacedFrame, withBundle } from '@offline-bundle/format';
import { AgentError } from '../errors.js';

/** Throws PartsMixed naming the first part where a frame the seek table lists does not start. */
export async function checkFramesFit(
  file: string,
  base: string,
  count: number,
  splitSize: number,
): Promise<void> {
  const partOf = (offset: number) => Math.min(count, Math.floor(offset / splitSize) + 1);
  const mixed = (n: number, what: string) =>
    new AgentError(
      'PartsMixed',
      `part ${n} of ${count} of ${base} does not fit the others (${what}): one of it and part ${count} (whose end lists the bundle's frames) is from another bundle of the same name; the copied parts were dropped: plug in the sticks of one bundle, one after another`,
    );
  await withBundle(file, async (source) => {
    const bad = await misplacedFrame(source).catch((err: Error) => {
      throw mixed(partOf(source.size - 1), `its seek table does not read: ${err.message}`);
    });
    if (bad !== undefined)
      throw mixed(
        partOf(bad),
        `no zstd frame at byte ${bad} of the bundle, where the seek table says one starts`,
      );
  });
}
