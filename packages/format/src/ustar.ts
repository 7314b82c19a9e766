import { FormatError } from './errors.js';
import { TAR_BLOCK } from './layout.js';

/** Numeric tar header fields: octal text, or GNU base-256 (high bit set) for sizes of 8 GiB and more. */
export function octal(buf: Buffer, start: number, len: number): number {
  const field = buf.subarray(start, start + len);
  if (field[0]! & 0x80) {
    // base-256 (GNU) for sizes of 8 GiB and more
    let v = 0;
    for (let i = 1; i < field.length; i++) v = v * 256 + field[i]!;
    return v;
  }
  const text = field.toString('ascii').replace(/\0.*$/s, '').trim();
  return text ? parseInt(text, 8) : 0;
}

/** The fields of a ustar header the index walk needs; the checksum guards against a misplaced frame. */
export function parseHeader(block: Buffer): { name: string; size: number; type: string } | null {
  if (block.every((b) => b === 0)) return null;
  let sum = 0;
  for (let i = 0; i < TAR_BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : block[i]!;
  if (sum !== octal(block, 148, 8))
    throw new FormatError(
      'BAD_SEEK_TABLE',
      'the seek index points at a block that is not a tar header',
    );
  let name = block.toString('utf8', 0, 100).replace(/\0.*$/s, '');
  const prefix = block.toString('utf8', 345, 500).replace(/\0.*$/s, '');
  if (block.toString('ascii', 257, 262) === 'ustar' && prefix) name = `${prefix}/${name}`;
  return { name, size: octal(block, 124, 12), type: String.fromCharCode(block[156]!) };
}
