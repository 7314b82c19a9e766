import { quoteName } from '@offline-bundle/host';
import { TAR_BLOCK } from './layout.js';
import { octal } from './ustar.js';

/**
 * The one ustar header the writer (tar-stream's packer, fed writer.ts's fixed metadata)
 * writes for an entry, byte for byte: name (every name the format allows fits its 100 bytes,
 * so no prefix), mode 0644, uid/gid 0, size, mtime 0, typeflag '0', no link name, magic
 * "ustar\0" version "00", empty user and group names, device numbers 0. Numbers are
 * zero-padded octal ending in a space (and a NUL where the field has room), as tar-stream
 * writes them; sizes of 8 GiB and more in GNU base-256, as it does too.
 *
 * Holding readers to these exact bytes, rather than to parsed values, is what makes "same
 * bytes, same meaning" hold for every tar implementation: no field is left for one tool to
 * read differently from another (a prefix, a GNU magic, digits after a NUL, an mtime).
 */
export function canonicalHeader(name: string, size: number): Buffer | undefined {
  if (
    name.length === 0 ||
    name.length > 100 ||
    !/^[\x21-\x7e]+$/.test(name) ||
    !Number.isSafeInteger(size) ||
    size < 0
  )
    return undefined;
  const b = Buffer.alloc(TAR_BLOCK);
  b.write(name, 0, 'latin1');
  b.write('000644 \0', 100, 'latin1');
  b.write('000000 \0', 108, 'latin1');
  b.write('000000 \0', 116, 'latin1');
  const sizeOctal = size.toString(8);
  if (sizeOctal.length <= 11) {
    b.write(sizeOctal.padStart(11, '0') + ' ', 124, 'latin1');
  } else {
    b[124] = 0x80;
    for (let i = 11, v = size; i > 0; i--, v = Math.floor(v / 256)) b[124 + i] = v % 256;
  }
  b.write('00000000000 ', 136, 'latin1');
  b[156] = 0x30; // '0': a regular file
  b.write('ustar\0' + '00', 257, 'latin1');
  b.write('000000 \0', 329, 'latin1');
  b.write('000000 \0', 337, 'latin1');
  b.fill(0x20, 148, 156);
  let sum = 0;
  for (const byte of b) sum += byte;
  b.write(sum.toString(8).padStart(6, '0') + ' \0', 148, 'latin1');
  return b;
}

const FIELDS: [string, number, number][] = [
  ['name', 0, 100],
  ['mode', 100, 108],
  ['uid', 108, 116],
  ['gid', 116, 124],
  ['size', 124, 136],
  ['mtime', 136, 148],
  ['checksum', 148, 156],
  ['typeflag', 156, 157],
  ['linkname', 157, 257],
  ['magic', 257, 263],
  ['version', 263, 265],
  ['uname', 265, 297],
  ['gname', 297, 329],
  ['devmajor', 329, 337],
  ['devminor', 337, 345],
  ['prefix', 345, 500],
  ['padding', 500, 512],
];

const shown = (bytes: Buffer): string =>
  JSON.stringify(bytes.toString('latin1').replace(/\0+$/, ''));

/**
 * How a header block differs from the canonical header for its own name and size: the first
 * field that differs, with what it holds and what the format writes; undefined when it is
 * canonical. Name and size are judged elsewhere (listed, matching), so they are taken as found.
 */
export function headerMismatch(block: Buffer): string | undefined {
  const nameBytes = block.subarray(0, 100);
  const end = nameBytes.indexOf(0);
  const want = canonicalHeader(
    nameBytes.toString('latin1', 0, end < 0 ? 100 : end),
    octal(block, 124, 12),
  );
  if (!want)
    return `name ${shown(nameBytes)} or size ${shown(block.subarray(124, 136))}, which the format never writes`;
  for (const [field, start, stop] of FIELDS) {
    if (!block.subarray(start, stop).equals(want.subarray(start, stop))) {
      return `${field} ${shown(block.subarray(start, stop))} where the format writes ${shown(want.subarray(start, stop))}`;
    }
  }
  return undefined;
}

/** The one-line reason a reader gives for a non-canonical header. */
export const headerMessage = (name: string, mismatch: string): string =>
  `entry ${quoteName(name)} has ${mismatch} (docs/FORMAT.md §2 fixes every header field): the bundle was not written by bundle create or was altered; rebuild it`;
