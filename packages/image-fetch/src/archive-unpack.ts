import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, normalize, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import tar from 'tar-stream';
import { OciError } from '@offline-bundle/oci';
import { assertRegularFile, quoteName } from '@offline-bundle/host';

/**
 * Unpacks an image archive (tar, optionally gzip) into a fresh temp dir. Only regular files
 * and directories are taken; a path that would leave the directory is an error.
 */
export async function unpackArchive(
  file: string,
  description: string,
  parent = tmpdir(),
): Promise<{ dir: string; remove: () => Promise<void> }> {
  // a FIFO or device named as the archive would hang the first read or never end
  await assertRegularFile(file);
  const dir = await mkdtemp(join(parent, 'ob-archive-'));
  const remove = () => rm(dir, { recursive: true, force: true });
  try {
    const extract = tar.extract();
    const done = (async () => {
      for await (const entry of extract) {
        const name = normalize(entry.header.name).replace(/^(\.\/)+/, '');
        if (name.startsWith('..') || name.startsWith(sep))
          throw new OciError(
            'INVALID_ARCHIVE',
            `${description}: entry ${quoteName(entry.header.name)} leaves the archive`,
          );
        const target = join(dir, name);
        if (entry.header.type === 'directory') {
          await mkdir(target, { recursive: true });
          entry.resume();
        } else if (entry.header.type === 'file') {
          await mkdir(dirname(target), { recursive: true });
          await pipeline(entry, createWriteStream(target));
        } else {
          entry.resume();
        }
      }
    })();
    const head = await new Promise<Buffer>((resolve, reject) => {
      const s = createReadStream(file, { start: 0, end: 1 });
      const parts: Buffer[] = [];
      s.on('data', (c) => parts.push(c as Buffer))
        .on('end', () => resolve(Buffer.concat(parts)))
        .on('error', reject);
    });
    const gz = head[0] === 0x1f && head[1] === 0x8b;
    await Promise.all([
      gz
        ? pipeline(createReadStream(file), createGunzip(), extract)
        : pipeline(createReadStream(file), extract),
      done,
    ]);
    return { dir, remove };
  } catch (err) {
    await remove();
    if (err instanceof OciError) throw err;
    throw new OciError(
      'INVALID_ARCHIVE',
      `${description}: cannot unpack ${file}: ${(err as Error).message}`,
      { cause: err },
    );
  }
}
