// Parts of two bundles of one name split at one size pass every check by names and sizes. Once
// the spool holds them all, the seek table at the bundle's end lists where every zstd frame
// starts: each of those offsets must hold a frame's magic number. A part of another bundle
// breaks that at once, and is named here, before the load reads a byte of it.
import { readSeekIndex, withBundle } from '@offline-bundle/format';
import { AgentError } from '../errors.js';

/** A zstd frame's magic number, little-endian: where the seek table says a frame starts. */
const ZSTD_FRAME = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);
/** One read's span: many frame starts checked per read, a few MiB read for a 20 GB bundle's ten thousand frames. */
const WINDOW_BYTES = 16 * 1024;

/**
 * Throws PartsMixed naming the first part where a frame the seek table lists does not start.
 * Reads the table and, per frame start (a 20 GB bundle has some ten thousand), a 16 KiB window unless the last one holds it.
 */
export async function checkFramesFit(file: string, base: string, count: number, splitSize: number): Promise<void> {
  const partOf = (offset: number) => Math.min(count, Math.floor(offset / splitSize) + 1);
  const mixed = (n: number, what: string) => new AgentError('PartsMixed',
    `part ${n} of ${count} of ${base} does not fit the others (${what}): one of it and part ${count} (whose end lists the bundle's frames) is from another bundle of the same name; the copied parts were dropped: plug in the sticks of one bundle, one after another`);
  await withBundle(file, async (source) => {
    const index = await readSeekIndex(source).catch((err: Error) => { throw mixed(partOf(source.size - 1), `its seek table does not read: ${err.message}`); });
    // small frames (tar headers, small blobs) lie close together: one read serves many
    let window: { start: number; bytes: Buffer } = { start: 0, bytes: Buffer.alloc(0) };
    for (const f of index.frames) {
      const at = f.compressedOffset - window.start;
      if (at < 0 || at + ZSTD_FRAME.length > window.bytes.length) window = { start: f.compressedOffset, bytes: await source.read(f.compressedOffset, WINDOW_BYTES) };
      const o = f.compressedOffset - window.start;
      if (!window.bytes.subarray(o, o + ZSTD_FRAME.length).equals(ZSTD_FRAME)) throw mixed(partOf(f.compressedOffset), `no zstd frame at byte ${f.compressedOffset} of the bundle, where the seek table says one starts`);
    }
  });
}
