// Mutations of the base bundle at five levels. Each takes a case's Rng and the split base
// bundle and returns { desc, bytes, resigned? }: the mutated file, a one-line description that
// names exactly what was done, and, when bundle.json was edited and signed again with the
// factory key, the new bundle.json bytes (trusted by definition).
import { BUNDLE_JSON, FRAME_BYTES, SIGNATURE } from '@offline-bundle/format';
import {
  TAR_BLOCK,
  assemble,
  dataSegments,
  encodeTable,
  fileHeader,
  fixChecksum,
  frameHeaderSize,
  paxSegments,
  readField,
  readOctal,
  replaceHead,
  rleFrame,
  signBytes,
  skippableFrame,
  writeOctal,
  writeString,
  zstdFrame,
} from './bundle.mjs';

export const LEVELS = ['byte', 'frame', 'seek', 'tar', 'json'];

const GiB = 1024 ** 3;
const hex64 = (rng) => rng.bytes(32).toString('hex');

/** Where frames start in the base file, for aiming byte mutations at frame headers. */
function frameOffsets(base) {
  const out = [];
  let o = 0;
  for (const s of base.segs) {
    out.push({ start: o, end: o + s.comp.length });
    o += s.comp.length;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// byte: raw edits anywhere in the file

function bytePosition(rng, base) {
  const n = base.bytes.length;
  const frames = base.frameOffsets;
  const tableStart = n - base.table.length;
  return rng.weighted([
    [4, () => ({ pos: rng.int(n), where: 'anywhere' })],
    [2, () => ({ pos: tableStart + rng.int(base.table.length), where: 'seek table' })],
    [1, () => ({ pos: n - 1 - rng.int(9), where: 'seek footer' })],
    [
      3,
      () => {
        const f = rng.pick(frames);
        return { pos: f.start + rng.int(Math.min(14, f.end - f.start)), where: 'frame header' };
      },
    ],
    [
      1,
      () => {
        const f = rng.pick(frames);
        return { pos: Math.max(f.start, f.end - 1 - rng.int(4)), where: 'frame checksum' };
      },
    ],
    [
      2,
      () => {
        const f = frames[rng.int(4)];
        return { pos: f.start + rng.int(f.end - f.start), where: 'bundle.json/signature frames' };
      },
    ],
  ])();
}

export function mutateByte(rng, base) {
  const buf = Buffer.from(base.bytes);
  const { pos, where } = bytePosition(rng, base);
  const op = rng.weighted([
    [4, 'flip'],
    [3, 'set'],
    [2, 'insert'],
    [2, 'delete'],
    [1, 'truncate'],
    [1, 'zero'],
    [1, 'append'],
    [1, 'multi'],
  ]);
  switch (op) {
    case 'flip': {
      const bit = rng.int(8);
      buf[pos] ^= 1 << bit;
      return { desc: `byte: flip bit ${bit} at ${pos} (${where})`, bytes: buf };
    }
    case 'set': {
      const v = rng.pick([0, 0xff, 0x80, 0x7f, rng.int(256)]);
      buf[pos] = v;
      return { desc: `byte: set ${pos} (${where}) to 0x${v.toString(16)}`, bytes: buf };
    }
    case 'insert': {
      const len = rng.pick([1, 1, 2, 4, 8, 512, rng.range(1, 64)]);
      const ins = rng.chance(0.5) ? Buffer.alloc(len) : rng.bytes(len);
      return {
        desc: `byte: insert ${len} bytes at ${pos} (${where})`,
        bytes: Buffer.concat([buf.subarray(0, pos), ins, buf.subarray(pos)]),
      };
    }
    case 'delete': {
      const len = Math.min(buf.length - pos, rng.pick([1, 1, 2, 4, 8, 512, rng.range(1, 64)]));
      return {
        desc: `byte: delete ${len} bytes at ${pos} (${where})`,
        bytes: Buffer.concat([buf.subarray(0, pos), buf.subarray(pos + len)]),
      };
    }
    case 'truncate':
      return { desc: `byte: truncate to ${pos} bytes (${where})`, bytes: buf.subarray(0, pos) };
    case 'zero': {
      const len = Math.min(buf.length - pos, rng.range(1, 1024));
      buf.fill(0, pos, pos + len);
      return { desc: `byte: zero ${len} bytes at ${pos} (${where})`, bytes: buf };
    }
    case 'append': {
      const extra = rng.pick([
        Buffer.alloc(1),
        Buffer.alloc(512),
        rng.bytes(rng.range(1, 100)),
        base.table,
        skippableFrame(Buffer.alloc(4)),
      ]);
      return { desc: `byte: append ${extra.length} bytes`, bytes: Buffer.concat([buf, extra]) };
    }
    default: {
      const k = rng.range(2, 16);
      const ps = [];
      for (let i = 0; i < k; i++) {
        const p = bytePosition(rng, base).pos;
        buf[p] = rng.int(256);
        ps.push(p);
      }
      return { desc: `byte: set ${k} random bytes at ${ps.join(',')}`, bytes: buf };
    }
  }
}

// ---------------------------------------------------------------------------------------------
// frame: whole zstd frames dropped, duplicated, moved, replaced, their headers edited

function pickFrame(rng, base) {
  const k = pickFrameRaw(rng, base);
  return k >= 0 ? k : rng.int(base.segs.length);
}

function pickFrameRaw(rng, base) {
  return rng.weighted([
    [3, () => rng.int(base.segs.length)],
    [1, () => rng.int(4)], // bundle.json / signature
    [1, () => base.segs.findIndex((s) => s.kind === 'data' && s.raw.length === FRAME_BYTES)], // first frame of the 2-frame blob
    [1, () => base.segs.length - 1], // trailer
  ])();
}

export function mutateFrame(rng, base) {
  const segs = base.segs.map((s) => ({ ...s }));
  const n = segs.length;
  const i = pickFrame(rng, base);
  const label = (k) => `frame ${k} (${base.segs[k].kind}${base.segs[k].entry ?? ''})`;
  const op = rng.weighted([
    [2, 'drop'],
    [2, 'duplicate'],
    [2, 'swap'],
    [2, 'move'],
    [1, 'reverse'],
    [3, 'replace'],
    [3, 'bomb'],
    [3, 'descriptor'],
    [1, 'checksum'],
    [1, 'reencode'],
    [1, 'merge'],
    [1, 'split'],
    [1, 'skippable'],
    [1, 'window'],
  ]);
  // Most cases write a seek table that matches the frames written, so the mutation itself is
  // judged; some keep the original table (which then no longer fits).
  const staleTable = rng.chance(0.2);
  const tableOpt = staleTable ? { table: base.table } : {};
  const suffix = staleTable ? ', original seek table kept' : '';
  let desc;
  switch (op) {
    case 'drop':
      segs.splice(i, 1);
      desc = `drop ${label(i)}`;
      break;
    case 'duplicate':
      segs.splice(i, 0, { ...segs[i] });
      desc = `duplicate ${label(i)}`;
      break;
    case 'swap': {
      const j = rng.chance(0.5) ? Math.min(n - 1, i + 1) : rng.int(n);
      [segs[i], segs[j]] = [segs[j], segs[i]];
      desc = `swap ${label(i)} and ${label(j)}`;
      break;
    }
    case 'move': {
      const j = rng.int(n);
      const [s] = segs.splice(i, 1);
      segs.splice(j, 0, s);
      desc = `move ${label(i)} to position ${j}`;
      break;
    }
    case 'reverse': {
      const j = Math.min(n, i + rng.range(2, 6));
      const part = segs.slice(i, j).reverse();
      segs.splice(i, part.length, ...part);
      desc = `reverse frames ${i}..${j - 1}`;
      break;
    }
    case 'replace': {
      const len = base.segs[i].raw.length;
      const kind = rng.pick([
        'random-same-size',
        'random-other-size',
        'zeros-same-size',
        'other-frame-content',
        'one-byte-changed',
      ]);
      let raw;
      if (kind === 'random-same-size') raw = rng.bytes(len);
      else if (kind === 'random-other-size')
        raw = rng.bytes(rng.pick([1, 511, 513, len + 512, Math.max(0, len - 512)]));
      else if (kind === 'zeros-same-size') raw = Buffer.alloc(len);
      else if (kind === 'other-frame-content') raw = base.segs[rng.int(n)].raw;
      else {
        raw = Buffer.from(base.segs[i].raw);
        raw[rng.int(raw.length)] ^= 1 << rng.int(8);
      }
      segs[i] = { raw, comp: zstdFrame(raw) };
      desc = `replace ${label(i)} by a valid frame of ${kind} (${raw.length} bytes)`;
      break;
    }
    case 'bomb': {
      const variant = rng.pick([
        '1GiB-fcs',
        '1GiB-no-fcs',
        '1GiB-fcs-lies-512',
        'frame-limit+1',
        'frame-limit-exact',
        '64MiB-0xff',
      ]);
      const size = {
        '1GiB-fcs': GiB,
        '1GiB-no-fcs': GiB,
        '1GiB-fcs-lies-512': GiB,
        'frame-limit+1': FRAME_BYTES + 1,
        'frame-limit-exact': FRAME_BYTES,
        '64MiB-0xff': 64 * 1024 * 1024,
      }[variant];
      const fcs =
        variant === '1GiB-no-fcs' ? 'none' : variant === '1GiB-fcs-lies-512' ? 512 : 'true';
      const comp = rleFrame(size, { fcs, byte: variant === '64MiB-0xff' ? 0xff : 0 });
      const where = rng.pick(['replace', 'insert-before', 'append-after-archive']);
      // the seek table lists the decompressed size the frame claims (capped to fit u32)
      const entry = { raw: Buffer.alloc(0), comp, size: Math.min(size, 0xffffffff) };
      if (where === 'replace') segs[i] = entry;
      else if (where === 'insert-before') segs.splice(i, 0, entry);
      else segs.push(entry);
      desc = `decompression bomb ${variant} (${comp.length} bytes, ${size} decoded) ${where === 'append-after-archive' ? 'after the archive' : `${where} ${label(i)}`}`;
      break;
    }
    case 'descriptor': {
      const bit = rng.pick([0, 1, 2, 2, 3, 4, 5, 6, 7]);
      const names = [
        'dictID flag bit 0',
        'dictID flag bit 1',
        'checksum flag',
        'reserved bit',
        'unused bit',
        'single-segment flag',
        'FCS field size bit 0',
        'FCS field size bit 1',
      ];
      const comp = Buffer.from(segs[i].comp);
      comp[4] ^= 1 << bit;
      segs[i] = { ...segs[i], comp };
      desc = `flip the ${names[bit]} in the header of ${label(i)}`;
      break;
    }
    case 'checksum': {
      const comp = Buffer.from(segs[i].comp);
      comp[comp.length - 1 - rng.int(4)] ^= 1 << rng.int(8);
      segs[i] = { ...segs[i], comp };
      desc = `damage the XXH64 checksum of ${label(i)}`;
      break;
    }
    case 'reencode': {
      const opts = rng.pick([
        { checksum: false },
        { contentSize: false },
        { level: 19 },
        { checksum: false, contentSize: false },
      ]);
      segs[i] = { raw: segs[i].raw, comp: zstdFrame(segs[i].raw, opts) };
      desc = `re-encode ${label(i)} with ${JSON.stringify(opts)} (same bytes)`;
      break;
    }
    case 'merge': {
      const j = Math.min(n - 1, i + 1);
      if (j === i) {
        segs.splice(i, 1);
        desc = `drop ${label(i)}`;
        break;
      }
      const raw = Buffer.concat([segs[i].raw, segs[j].raw]);
      segs.splice(i, 2, { raw, comp: zstdFrame(raw) });
      desc = `merge ${label(i)} and ${label(j)} into one frame (same bytes)`;
      break;
    }
    case 'split': {
      const raw = segs[i].raw;
      const at =
        rng.pick([1, 256, TAR_BLOCK, Math.floor(raw.length / 2), Math.max(1, raw.length - 1)]) %
        Math.max(1, raw.length);
      segs.splice(i, 1, { raw: raw.subarray(0, at) }, { raw: raw.subarray(at) });
      desc = `split ${label(i)} at ${at} (same bytes)`;
      break;
    }
    case 'skippable': {
      const payload = rng.chance(0.5) ? rng.bytes(rng.range(0, 64)) : Buffer.alloc(rng.range(0, 8));
      segs.splice(i, 0, { raw: Buffer.alloc(0), comp: skippableFrame(payload, rng.int(16)) });
      desc = `insert a skippable frame (${payload.length} bytes) before ${label(i)}`;
      break;
    }
    default: {
      // a window size the bounded decoder must refuse (or a tiny one the frame does not fit)
      const comp = Buffer.from(segs[i].comp);
      const single = (comp[4] >> 5) & 1;
      if (single) comp[4] &= ~(1 << 5);
      const hs = frameHeaderSize(segs[i].comp);
      const wd = rng.pick([0xf8, 0xd0, 0x00, 0x58]);
      const out = single
        ? Buffer.concat([comp.subarray(0, 5), Buffer.from([wd]), comp.subarray(5)])
        : ((comp[5] = wd), comp);
      segs[i] = { ...segs[i], comp: out };
      desc = `set the window descriptor of ${label(i)} to 0x${wd.toString(16)} (header ${hs} bytes)`;
    }
  }
  return { desc: `frame: ${desc}${suffix}`, bytes: assemble(segs, tableOpt) };
}

// ---------------------------------------------------------------------------------------------
// seek: the trailing seek table (outside the signature)

export function mutateSeek(rng, base) {
  const frames = base.segs.map((s) => ({
    compressedSize: s.comp.length,
    decompressedSize: s.raw.length,
  }));
  const body = base.bytes.subarray(0, base.bytes.length - base.table.length);
  const n = frames.length;
  const i = rng.int(n);
  const j = rng.int(n);
  const op = rng.weighted([
    [3, 'csize'],
    [3, 'dsize'],
    [2, 'shift'],
    [1, 'swap-entries'],
    [1, 'count'],
    [1, 'descriptor'],
    [1, 'magic'],
    [1, 'skip-magic'],
    [1, 'frame-size'],
    [1, 'remove'],
    [1, 'remove-entry'],
    [1, 'extra-entry'],
    [1, 'twice'],
    [1, 'after'],
    [1, 'truncated'],
    [1, 'huge'],
  ]);
  const delta = () =>
    rng.pick([1, -1, 512, -512, 4096, 0x7fffffff, -frames[i].compressedSize, 2 ** 32 - 1]);
  let table;
  let desc;
  switch (op) {
    case 'csize': {
      const d = delta();
      frames[i].compressedSize += d;
      desc = `compressed size of entry ${i} ${d >= 0 ? '+' : ''}${d}`;
      break;
    }
    case 'dsize': {
      const d = rng.pick([1, -1, 512, -512, FRAME_BYTES, -frames[i].decompressedSize, 2 ** 32 - 1]);
      frames[i].decompressedSize += d;
      desc = `decompressed size of entry ${i} ${d >= 0 ? '+' : ''}${d}`;
      break;
    }
    case 'shift': {
      // sizes moved between two entries, sums unchanged: the table still accounts for the file
      const k = Math.min(n - 1, i + 1);
      const field = rng.pick(['compressedSize', 'decompressedSize']);
      const d = rng.pick([1, 512, 7, frames[i][field]]);
      frames[i][field] -= d;
      frames[k][field] += d;
      desc = `move ${d} of ${field} from entry ${i} to entry ${k} (sums kept)`;
      break;
    }
    case 'swap-entries':
      [frames[i], frames[j]] = [frames[j], frames[i]];
      desc = `swap entries ${i} and ${j}`;
      break;
    case 'count': {
      const c = rng.pick([0, 1, n - 1, n + 1, 0xffffffff, 0x8000000]);
      table = encodeTable(frames, { count: c });
      desc = `frame count ${n} -> ${c}`;
      break;
    }
    case 'descriptor': {
      const d = rng.pick([0x80, 0x01, 0x40, 0xff, 0x7c, 0x03]);
      table = encodeTable(frames, { descriptor: d });
      desc = `descriptor 0 -> 0x${d.toString(16)}`;
      break;
    }
    case 'magic': {
      const m = rng.pick([0, 0x8f92eab0, 0xb1ea928f, 0x184d2a5e]);
      table = encodeTable(frames, { magic: m });
      desc = `seekable magic -> 0x${m.toString(16)}`;
      break;
    }
    case 'skip-magic': {
      const m = rng.pick([0x184d2a50, 0x184d2a5f, 0xfd2fb528, 0]);
      table = encodeTable(frames, { skipMagic: m });
      desc = `skippable frame magic -> 0x${m.toString(16)}`;
      break;
    }
    case 'frame-size': {
      const s = rng.pick([0, 9, 8 * n + 8, 8 * n + 10, 0xffffffff]);
      table = encodeTable(frames, { frameSize: s });
      desc = `skippable frame size -> ${s}`;
      break;
    }
    case 'remove':
      table = Buffer.alloc(0);
      desc = 'seek table removed';
      break;
    case 'remove-entry':
      frames.splice(i, 1);
      desc = `entry ${i} removed`;
      break;
    case 'extra-entry':
      frames.splice(
        i,
        0,
        rng.pick([
          { compressedSize: 0, decompressedSize: 0 },
          { compressedSize: 0, decompressedSize: 512 },
          { compressedSize: 13, decompressedSize: 0 },
        ]),
      );
      desc = `extra entry at ${i}`;
      break;
    case 'twice':
      table = Buffer.concat([encodeTable(frames), encodeTable(frames)]);
      desc = 'seek table written twice';
      break;
    case 'after':
      table = Buffer.concat([
        encodeTable(frames),
        rng.pick([skippableFrame(Buffer.alloc(9)), zstdFrame(Buffer.alloc(512)), rng.bytes(9)]),
      ]);
      desc = 'a frame appended after the seek table';
      break;
    case 'truncated': {
      const t = encodeTable(frames);
      const cut = rng.range(1, t.length - 1);
      table = Buffer.concat([t.subarray(0, cut), t.subarray(t.length - 9)]);
      desc = `seek table cut to ${cut} bytes + footer`;
      break;
    }
    default: {
      // every entry claims a frame far larger than it is, sums made to fit nothing
      for (const f of frames)
        f.decompressedSize = rng.pick([FRAME_BYTES, FRAME_BYTES + 1, 0xffffffff]);
      desc = 'every entry claims a huge decompressed size';
    }
  }
  table ??= encodeTable(frames);
  return { desc: `seek: ${desc}`, bytes: Buffer.concat([body, table]) };
}

// ---------------------------------------------------------------------------------------------
// tar: a header field edited (checksum recomputed, mostly), or extension headers inserted

export function mutateTar(rng, base) {
  const segs = base.segs.map((s) => ({ ...s }));
  const e = rng.weighted([
    [1, 0],
    [1, 1],
    [6, rng.int(base.entries.length)],
  ]);
  const entry = base.entries[e];
  const hi = entry.header;
  const h = Buffer.from(segs[hi].raw);
  const other = base.entries[(e + 1 + rng.int(base.entries.length - 1)) % base.entries.length].name;
  const field = rng.weighted([
    [4, 'name'],
    [3, 'size'],
    [3, 'typeflag'],
    [1, 'mode'],
    [1, 'checksum'],
    [2, 'linkname'],
    [2, 'prefix'],
    [1, 'magic'],
    [1, 'owner'],
    [3, 'pax'],
    [1, 'gnu-longname'],
    [1, 'grow'],
  ]);
  let fix = rng.chance(0.9);
  let desc;
  let inserted;
  switch (field) {
    case 'name': {
      const v = rng.pick([
        '../evil',
        '../../../../tmp/evil',
        '/etc/evil',
        'blobs/sha256/../../evil',
        `./${entry.name}`,
        `${entry.name}/`,
        'blobs//sha256/x',
        other,
        BUNDLE_JSON,
        SIGNATURE,
        `blobs/sha256/${hex64(rng)}`,
        entry.name.toUpperCase(),
        '',
        `${entry.name}\0junk`,
        'blobs/sha256/é',
        'a'.repeat(100),
        'blobs',
        'blobs/sha256',
        'blobs/sha256/',
        '.',
        '..',
      ]);
      writeString(h, 0, 100, v);
      desc = `name ${JSON.stringify(entry.name)} -> ${JSON.stringify(v)}`;
      break;
    }
    case 'size': {
      const kind = rng.pick([
        '+1',
        '-1',
        '+512',
        '-512',
        '0',
        'huge',
        'base256-same',
        'base256-huge',
        'negative-base256',
        'garbage',
        'spaces',
        'no-terminator',
      ]);
      const s = entry.size;
      if (kind === 'base256-same' || kind === 'base256-huge' || kind === 'negative-base256') {
        h.fill(0, 124, 136);
        if (kind === 'negative-base256') h.fill(0xff, 124, 136);
        else {
          h[124] = 0x80;
          const v = kind === 'base256-same' ? BigInt(s) : 2n ** 62n;
          for (let k = 0; k < 8; k++) h[135 - k] = Number((v >> BigInt(8 * k)) & 0xffn);
        }
      } else if (kind === 'garbage') writeString(h, 124, 12, 'zzzzzzzzzz');
      else if (kind === 'spaces') writeString(h, 124, 12, '           ');
      else if (kind === 'no-terminator') h.write('77777777777777'.slice(0, 12), 124, 'latin1');
      else if (kind === 'huge') writeOctal(h, 124, 12, 0o77777777777);
      else
        writeOctal(
          h,
          124,
          12,
          Math.max(0, { '+1': s + 1, '-1': s - 1, '+512': s + 512, '-512': s - 512, 0: 0 }[kind]),
        );
      desc = `size ${s} -> ${kind}`;
      break;
    }
    case 'typeflag': {
      const t = rng.pick([
        '1',
        '2',
        '3',
        '4',
        '5',
        '6',
        '7',
        'x',
        'g',
        'L',
        'K',
        'S',
        'V',
        'D',
        'M',
        '\0',
        'A',
        ' ',
      ]);
      h[156] = t.charCodeAt(0);
      if ((t === '1' || t === '2') && rng.chance(0.7))
        writeString(h, 157, 100, rng.pick(['/etc/passwd', '../../evil', other]));
      desc = `typeflag '0' -> ${JSON.stringify(t)}`;
      break;
    }
    case 'mode': {
      const m = rng.pick(['4755', '7777', '777', '000', 'zz']);
      writeString(h, 100, 8, m === 'zz' ? 'zzzzzzz' : m.padStart(6, '0') + ' ');
      desc = `mode -> ${m}`;
      break;
    }
    case 'checksum': {
      fix = false;
      const v = rng.pick(['0', 'wrong', 'garbage']);
      if (v === 'garbage') writeString(h, 148, 8, 'zzzzzz');
      else writeOctal(h, 148, 8, v === '0' ? 0 : readOctal(h, 148, 8) + rng.range(1, 100));
      desc = `checksum -> ${v}`;
      break;
    }
    case 'linkname': {
      const v = rng.pick(['/etc/passwd', '../../evil', other]);
      writeString(h, 157, 100, v);
      desc = `linkname -> ${JSON.stringify(v)} (typeflag kept)`;
      break;
    }
    case 'prefix': {
      const v = rng.pick(['..', '/tmp', 'blobs', 'x', '../../..', 'blobs/sha256']);
      writeString(h, 345, 155, v);
      desc = `prefix -> ${JSON.stringify(v)}`;
      break;
    }
    case 'magic': {
      const v = rng.pick([
        ['ustar ', ' \0'],
        ['\0\0\0\0\0\0', '\0\0'],
        ['USTAR\0', '00'],
        ['ustar\0', 'xx'],
      ]);
      h.write(v[0], 257, 'latin1');
      h.write(v[1], 263, 'latin1');
      desc = `magic/version -> ${JSON.stringify(v.join(''))}`;
      break;
    }
    case 'owner': {
      writeOctal(h, 108, 8, rng.pick([1000, 0o7777777]));
      writeString(h, 265, 32, 'root');
      writeOctal(h, 136, 12, rng.pick([1, 0o77777777777]));
      desc = 'uid, uname and mtime changed';
      break;
    }
    case 'pax': {
      const rec = rng.pick([
        { path: '../../evil' },
        { path: other },
        { path: `blobs/sha256/${hex64(rng)}` },
        { size: String(entry.size + 1) },
        { size: '0' },
        { linkpath: '/etc/passwd' },
        { comment: 'hello' },
        { path: '/etc/evil', size: '1' },
        { 'SCHILY.xattr.user.x': 'y' },
      ]);
      const type = rng.chance(0.8) ? 'x' : 'g';
      inserted = paxSegments(base.segs[0].raw, rec, type);
      if (rng.chance(0.15)) {
        // damaged record syntax
        const raw = Buffer.from(inserted[1].raw);
        raw.write('99999 ', 0, 'latin1');
        inserted[1] = { raw };
      }
      desc = `pax '${type}' header ${JSON.stringify(rec)} before ${JSON.stringify(entry.name)}`;
      break;
    }
    case 'gnu-longname': {
      const v = rng.pick(['../../evil', other, `blobs/sha256/${hex64(rng)}`, 'x'.repeat(300)]);
      const body = Buffer.from(v + '\0');
      inserted = [
        { raw: fileHeader(base.segs[0].raw, '././@LongLink', body.length, 'L') },
        ...dataSegments(body),
      ];
      desc = `GNU long-name 'L' header ${JSON.stringify(v.slice(0, 40))} before ${JSON.stringify(entry.name)}`;
      break;
    }
    default: {
      // a consistent, larger entry: size and data both grown (the tar itself stays well formed)
      const extra = rng.pick([1, 512, 4096]);
      const dataSegs = segs.filter((s, k) => k > hi && s.kind === 'data' && s.entry === e);
      const data = Buffer.concat([...dataSegs.map((s) => s.raw)]).subarray(0, entry.size);
      const grown = Buffer.concat([data, rng.bytes(extra)]);
      writeOctal(h, 124, 12, grown.length);
      fixChecksum(h);
      segs.splice(hi, 1 + dataSegs.length, { raw: h }, ...dataSegments(grown));
      return {
        desc: `tar: entry ${e} ${JSON.stringify(entry.name)} grown by ${extra} bytes (size field and data)`,
        bytes: assemble(segs),
      };
    }
  }
  if (inserted) {
    segs.splice(hi, 0, ...inserted);
    return { desc: `tar: entry ${e} ${desc}`, bytes: assemble(segs) };
  }
  if (fix) fixChecksum(h);
  segs[hi] = { raw: h };
  return {
    desc: `tar: entry ${e} ${desc}${fix ? '' : ', checksum not fixed'}`,
    bytes: assemble(segs),
  };
}

// ---------------------------------------------------------------------------------------------
// json: bundle.json (and its signature) edited, with and without signing again

const JSON_EDITS = [
  [
    "blob digest -> another blob's",
    (d, rng) => {
      const b = rng.pick(d.blobs);
      b.digest = rng.pick(d.blobs).digest;
    },
  ],
  [
    'blob digest -> random',
    (d, rng) => {
      rng.pick(d.blobs).digest = `sha256:${hex64(rng)}`;
    },
  ],
  [
    'blob digest -> uppercase hex',
    (d, rng) => {
      const b = rng.pick(d.blobs);
      b.digest = 'sha256:' + b.digest.slice(7).toUpperCase();
    },
  ],
  [
    'blob digest -> path traversal',
    (d, rng) => {
      rng.pick(d.blobs).digest = rng.pick([
        'sha256:../../../../tmp/evil',
        'sha256:/etc/evil',
        `sha256:${'a'.repeat(62)}/x`,
        'sha256:..',
      ]);
    },
  ],
  [
    'blob digest -> other algorithm',
    (d, rng) => {
      const b = rng.pick(d.blobs);
      b.digest = rng.pick([
        'sha512:' + b.digest.slice(7).repeat(2),
        'md5:' + b.digest.slice(7, 39),
        b.digest.slice(7),
        '',
      ]);
    },
  ],
  [
    'blob size +1',
    (d, rng) => {
      rng.pick(d.blobs).size += 1;
    },
  ],
  [
    'blob size -1',
    (d, rng) => {
      rng.pick(d.blobs).size -= 1;
    },
  ],
  [
    'blob size -> odd value',
    (d, rng) => {
      rng.pick(d.blobs).size = rng.pick([
        0,
        -1,
        1.5,
        1e20,
        '12',
        null,
        Number.MAX_SAFE_INTEGER,
        2 ** 53 + 2,
      ]);
    },
  ],
  [
    'blob removed',
    (d, rng) => {
      d.blobs.splice(rng.int(d.blobs.length), 1);
    },
  ],
  [
    'blob added',
    (d, rng) => {
      d.blobs.push({
        digest: `sha256:${hex64(rng)}`,
        size: rng.pick([0, 10, 1 << 20]),
        mediaType: 'application/octet-stream',
      });
    },
  ],
  [
    'blob listed twice',
    (d, rng) => {
      const b = rng.pick(d.blobs);
      d.blobs.push({ ...b });
    },
  ],
  [
    'blobs reordered',
    (d) => {
      d.blobs.reverse();
    },
  ],
  [
    'blobs emptied',
    (d) => {
      d.blobs = [];
    },
  ],
  [
    'index digest changed',
    (d, rng) => {
      d.index.digest = rng.chance(0.5) ? `sha256:${hex64(rng)}` : d.blobs[0].digest;
    },
  ],
  [
    'index size changed',
    (d, rng) => {
      d.index.size = rng.pick([d.index.size + 1, d.index.size - 1, 0, 17 * 1024 * 1024, -5]);
    },
  ],
  [
    'schemaVersion',
    (d, rng) => {
      d.schemaVersion = rng.pick([1, 3, 0, '2', null, 1.5, 99]);
    },
  ],
  [
    'mediaType',
    (d) => {
      d.mediaType = 'application/json';
    },
  ],
  [
    'release.arch',
    (d, rng) => {
      d.release.arch = rng.pick(['arm64', '', 'x86_64', '../amd64']);
    },
  ],
  [
    'release.version',
    (d, rng) => {
      d.release.version = rng.pick([
        '9.9.9',
        '0.0.1',
        '',
        '../../../../tmp/evil',
        '1.2.3/../../x',
        '1.2.3\n',
      ]);
    },
  ],
  [
    'release.upgradeFrom',
    (d, rng) => {
      d.release.upgradeFrom = rng.pick([[], ['9.9.9'], 'x', [1]]);
    },
  ],
  [
    'release removed',
    (d) => {
      delete d.release;
    },
  ],
  [
    'images removed',
    (d) => {
      d.images = [];
    },
  ],
  [
    'image added',
    (d, rng) => {
      d.images.push({
        repository: rng.pick(['example.com/other', '', 'UPPER/case', '../x']),
        tag: rng.pick(['v2', null, '']),
        digest: rng.pick([d.images[0].digest, `sha256:${hex64(rng)}`]),
        mediaType: d.images[0].mediaType,
        platforms: [],
      });
    },
  ],
  [
    'image digest changed',
    (d, rng) => {
      d.images[0].digest = `sha256:${hex64(rng)}`;
    },
  ],
  [
    'image repository changed',
    (d, rng) => {
      d.images[0].repository = rng.pick(['evil.example.com/app', '', 'a b']);
    },
  ],
  [
    'signer fingerprint changed',
    (d, rng) => {
      d.signer.fingerprint = `sha256:${hex64(rng)}`;
    },
  ],
  [
    'signer algorithm changed',
    (d, rng) => {
      d.signer.algorithm = rng.pick(['ecdsa-p256-sha256', 'rsa', '']);
    },
  ],
  [
    'totals changed',
    (d, rng) => {
      d.totals.layoutBytes = rng.pick([0, -1, 1e18]);
      d.totals.imageStoreBytes = rng.pick([0, 2 ** 60]);
    },
  ],
  [
    'creator changed',
    (d) => {
      d.creator.createdAt = 'yesterday';
    },
  ],
  [
    'unknown field added',
    (d) => {
      d.extra = { any: 'thing' };
    },
  ],
  [
    'required field removed',
    (d, rng) => {
      delete d[
        rng.pick(['blobs', 'index', 'images', 'signer', 'totals', 'creator', 'schemaVersion'])
      ];
    },
  ],
  ['whole document replaced', (d, rng) => rng.pick([[], null, 'string', 1, {}])],
];

const RAW_EDITS = [
  ['truncated JSON', (b, rng) => b.subarray(0, rng.int(b.length))],
  ['garbage appended', (b) => Buffer.concat([b, Buffer.from('}}garbage')])],
  ['BOM prefixed', (b) => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), b])],
  ['duplicate key', (b) => Buffer.from(b.toString().replace('{', '{\n  "schemaVersion": 1,'))],
  ['deep nesting', () => Buffer.from('['.repeat(100_000) + ']'.repeat(100_000))],
  [
    'invalid UTF-8',
    (b, rng) => {
      const c = Buffer.from(b);
      c[rng.range(1, c.length - 2)] = 0xff;
      return c;
    },
  ],
  ['NUL bytes', (b) => Buffer.concat([b, Buffer.alloc(100)])],
  ['over 16 MiB', (b) => Buffer.concat([b, Buffer.alloc(16 * 1024 * 1024 + 1, 0x20)])],
];

const SIG_EDITS = [
  [
    'signature bit flipped',
    (s, rng) => {
      const c = Buffer.from(s);
      c[rng.int(c.length)] ^= 1 << rng.int(8);
      return c;
    },
  ],
  ['signature emptied', () => Buffer.alloc(0)],
  ['signature of other bytes', (s, rng, base) => signBytes(rng.bytes(32), base.key.privateKey)],
  ['signature over 4 KiB', (s) => Buffer.concat([s, Buffer.alloc(5000)])],
  ['signature truncated', (s) => s.subarray(0, 63)],
];

export function mutateJson(rng, base) {
  const resign = rng.chance(0.6);
  const kind = rng.weighted([
    [7, 'json'],
    [2, 'raw'],
    [resign ? 0 : 2, 'sig'],
  ]);
  let bytes = base.manifestBytes;
  let sig = base.signature;
  let what;
  if (kind === 'json') {
    const doc = JSON.parse(bytes.toString('utf8'));
    const edits = rng.chance(0.2)
      ? [rng.pick(JSON_EDITS), rng.pick(JSON_EDITS)]
      : [rng.pick(JSON_EDITS)];
    let out = doc;
    const done = [];
    for (const [name, fn] of edits) {
      try {
        const r = fn(out, rng);
        if (r !== undefined) out = r;
        done.push(name);
      } catch {
        done.push(`(${name}: not applicable)`); // e.g. a blob edit after the blobs were emptied
      }
    }
    what = done.join(' + ');
    bytes = Buffer.from(JSON.stringify(out, null, 2) + '\n');
  } else if (kind === 'raw') {
    const [name, fn] = rng.pick(RAW_EDITS);
    bytes = fn(bytes, rng);
    what = name;
  } else {
    const [name, fn] = rng.pick(SIG_EDITS);
    sig = fn(sig, rng, base);
    what = name;
  }
  if (resign) sig = signBytes(bytes, base.key.privateKey);
  const segs = replaceHead(base, bytes, sig);
  return {
    desc: `json: ${what}${resign ? ', re-signed with the factory key' : ', not re-signed'}`,
    bytes: assemble(segs),
    ...(resign ? { resigned: { manifestBytes: bytes } } : {}),
  };
}

export const MUTATORS = {
  byte: mutateByte,
  frame: mutateFrame,
  seek: mutateSeek,
  tar: mutateTar,
  json: mutateJson,
};

export function prepareBase(base) {
  base.frameOffsets = frameOffsets(base);
  return base;
}

export { readField };
