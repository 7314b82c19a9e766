// Where `bundle write-media` writes: the mount a directory is on, what filesystem that is (FUSE
// mounts named by what they serve), whether it takes writes, and how much room it has. Read from
// /proc/self/mountinfo, statfs and, where those say too little, the filesystem's first sectors.
import { constants } from 'node:fs';
import { access, open, readFile, statfs } from 'node:fs/promises';
import { sep } from 'node:path';
import { BaseError } from '@offline-bundle/host';
import { FAT32_MAX_FILE } from './split.js';

export type MediaErrorCode =
  | 'NOT_A_MOUNT' // the directory is not a mount point of removable media
  | 'READ_ONLY' // the mount does not take writes
  | 'NO_SPACE' // the bundle does not fit, or the stick filled up while writing
  | 'OUTPUT_EXISTS' // files of the same bundle are on the stick already
  | 'NOT_A_BUNDLE' // a part, or a file the agent would not take for a bundle by its name
  | 'MEDIA_GONE' // the stick went away or failed while being written
  | 'READ_BACK_FAILED' // what was read back is not what was written
  | 'SAME_FILE' // the bundle given is the copy on the stick itself
  | 'SOURCE_CHANGED' // the bundle was cut or changed while it was being written
  | 'IO_ERROR';

export class MediaError extends BaseError<MediaErrorCode> {}

export interface Mount {
  mountPoint: string;
  /** As mountinfo says: vfat, ext4, fuse.fusefat, fuseblk... */
  fsType: string;
  source: string;
  readOnly: boolean;
}

const unescape = (s: string) =>
  s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));

/** mountinfo(5): field 5 the mount point, 6 its options; after the lone "-": type, source, superblock options. */
export function parseMountinfo(text: string): Mount[] {
  const out: Mount[] = [];
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-', 6);
    if (dash < 0 || f.length < dash + 3) continue;
    const ro = (opts = '') => opts.split(',').includes('ro');
    out.push({
      mountPoint: unescape(f[4]!),
      fsType: f[dash + 1]!,
      source: unescape(f[dash + 2]!),
      readOnly: ro(f[5]) || ro(f[dash + 3]),
    });
  }
  return out;
}

/** The mount `dir` (a real path) is on: the longest mount point above it, the last mounted of equals. */
export function mountOf(dir: string, mounts: Mount[]): Mount | undefined {
  let best: Mount | undefined;
  for (const m of mounts) {
    const inside =
      dir === m.mountPoint ||
      dir.startsWith(m.mountPoint.endsWith(sep) ? m.mountPoint : m.mountPoint + sep);
    if (inside && (!best || m.mountPoint.length >= best.mountPoint.length)) best = m;
  }
  return best;
}

export async function readMounts(file = '/proc/self/mountinfo'): Promise<Mount[]> {
  return parseMountinfo(await readFile(file, 'utf8'));
}

/** What the write has to respect: FAT's 4 GiB - 1 byte per file, or nothing ("whole"). */
export interface FsKind {
  /** A name for people: FAT32, exFAT, ext4... */
  name: string;
  /** The largest file it holds; undefined: no limit a bundle reaches. */
  maxFile?: number;
  /** Its type could not be told: split as FAT, which every filesystem holds. */
  guessed?: boolean;
}

const FAT: FsKind = { name: 'FAT32', maxFile: FAT32_MAX_FILE };
const BY_TYPE: Record<string, FsKind> = {
  vfat: FAT,
  msdos: FAT,
  fat: FAT,
  'fuse.fusefat': FAT,
  'fuse.fatfs': FAT,
  'fuse.vfat': FAT,
  exfat: { name: 'exFAT' },
  'fuse.exfat': { name: 'exFAT' },
  'fuse.exfat-fuse': { name: 'exFAT' },
  ntfs: { name: 'NTFS' },
  ntfs3: { name: 'NTFS' },
  'fuse.ntfs-3g': { name: 'NTFS' },
  'fuse.ntfs': { name: 'NTFS' },
  ext2: { name: 'ext2' },
  ext3: { name: 'ext3' },
  ext4: { name: 'ext4' },
  xfs: { name: 'xfs' },
  btrfs: { name: 'btrfs' },
  f2fs: { name: 'f2fs' },
  hfsplus: { name: 'HFS+' },
  udf: { name: 'UDF' },
  zfs: { name: 'ZFS' },
};

/** Filesystems that are never a stick: writing a bundle there is a mistake unless asked for. */
const NOT_MEDIA = new Set([
  'tmpfs',
  'ramfs',
  'proc',
  'sysfs',
  'devtmpfs',
  'devpts',
  'overlay',
  'squashfs',
  'nfs',
  'nfs4',
  'cifs',
  'smb3',
  '9p',
  'virtiofs',
  'autofs',
  'cgroup',
  'cgroup2',
  'iso9660',
]);
/** Mount points of the system itself. */
const SYSTEM_MOUNTS = new Set([
  '/',
  '/boot',
  '/boot/efi',
  '/efi',
  '/usr',
  '/var',
  '/home',
  '/etc',
  '/opt',
  '/srv',
  '/tmp',
  '/root',
  '/run',
  '/var/tmp',
]);

export function looksLikeMedia(m: Mount): boolean {
  return !NOT_MEDIA.has(m.fsType) && !SYSTEM_MOUNTS.has(m.mountPoint);
}

/** The first sectors of a FAT32 filesystem, as far as the room on it is concerned. */
interface FatBoot {
  clusterBytes: number;
  totalClusters: number;
  /** FSInfo's free cluster count; undefined when it says "unknown" or more than there are. */
  freeClusters?: number;
}

const BYTES_PER_SECTOR = new Set([512, 1024, 2048, 4096]);

/** FAT32's boot sector and FSInfo sector (Microsoft's FAT specification), or undefined when `head` is not FAT32. */
export function parseFat32(head: Buffer): FatBoot | undefined {
  if (head.length < 1024 || head.toString('latin1', 82, 90) !== 'FAT32   ') return undefined;
  const bps = head.readUInt16LE(11);
  const spc = head.readUInt8(13);
  if (!BYTES_PER_SECTOR.has(bps) || spc === 0 || (spc & (spc - 1)) !== 0) return undefined;
  const reserved = head.readUInt16LE(14);
  const fats = head.readUInt8(16);
  const sectors = head.readUInt32LE(32) || head.readUInt16LE(19);
  const fatSectors = head.readUInt32LE(36);
  const totalClusters = Math.floor((sectors - reserved - fats * fatSectors) / spc);
  if (totalClusters <= 0) return undefined;
  const boot: FatBoot = { clusterBytes: bps * spc, totalClusters };
  // FSInfo is sector 1 in every FAT32 mkfs writes; elsewhere it is not read (it is only a hint)
  const at = head.readUInt16LE(48) * bps;
  if (
    at + 512 > head.length ||
    head.readUInt32LE(at) !== 0x41615252 ||
    head.readUInt32LE(at + 484) !== 0x61417272
  )
    return boot;
  const free = head.readUInt32LE(at + 488);
  return free <= totalClusters ? { ...boot, freeClusters: free } : boot;
}

/** What the first sectors of the mount's source say it is; undefined when it is not a readable file or device. */
async function probeSource(source: string): Promise<{ kind?: FsKind; fat?: FatBoot }> {
  if (!source.startsWith('/')) return {};
  const fh = await open(source, constants.O_RDONLY | constants.O_NONBLOCK).catch(() => undefined);
  if (!fh) return {};
  try {
    const head = Buffer.alloc(8192);
    const { bytesRead } = await fh.read(head, 0, head.length, 0).catch(() => ({ bytesRead: 0 }));
    const h = head.subarray(0, bytesRead);
    if (h.length < 512) return {};
    if (h.toString('latin1', 3, 11) === 'EXFAT   ') return { kind: { name: 'exFAT' } };
    if (h.toString('latin1', 3, 11) === 'NTFS    ') return { kind: { name: 'NTFS' } };
    const fat = parseFat32(h);
    if (fat || /^FAT1[26] {3}$/.test(h.toString('latin1', 54, 62)))
      return { kind: FAT, ...(fat ? { fat } : {}) };
    return {};
  } finally {
    await fh.close();
  }
}

export interface Target {
  mount: Mount;
  kind: FsKind;
  /** Free bytes for us; undefined when the filesystem does not tell. */
  free?: number;
  /** The allocation unit: each file takes a whole number of these. */
  blockBytes: number;
}

/**
 * The filesystem `dir` is on and its room. Generic FUSE types (fuseblk, fuse) are told apart by
 * their source's first sectors. fusefat reports no size to statfs: then FAT32's FSInfo free count
 * is used, as the kernel's vfat driver does at mount.
 */
export async function describeTarget(dir: string, mount: Mount): Promise<Target> {
  const known = BY_TYPE[mount.fsType];
  const probed =
    known && !(known === FAT && mount.fsType.startsWith('fuse'))
      ? {}
      : await probeSource(mount.source);
  const kind = known ??
    probed.kind ?? {
      ...FAT,
      name: `${mount.fsType} (type unknown: split as FAT32)`,
      guessed: true,
    };
  const s = await statfs(dir);
  if (s.blocks > 0) return { mount, kind, free: s.bavail * s.bsize, blockBytes: s.bsize };
  const fat = probed.fat;
  if (fat?.freeClusters !== undefined)
    return { mount, kind, free: fat.freeClusters * fat.clusterBytes, blockBytes: fat.clusterBytes };
  return { mount, kind, blockBytes: fat?.clusterBytes ?? 32 * 1024 };
}

/** A write test the mount table cannot give: permissions, or a filesystem that went read-only on an error. */
export async function assertWritable(dir: string, mount: Mount): Promise<void> {
  const why = mount.readOnly
    ? 'it is mounted read-only'
    : await access(dir, constants.W_OK).then(
        () => undefined,
        (e: NodeJS.ErrnoException) => `it is not writable (${e.code})`,
      );
  if (why)
    throw new MediaError(
      'READ_ONLY',
      `cannot write to ${dir}: ${why} (${mount.fsType} on ${mount.source}); mount it read-write (e.g. "mount -o remount,rw ${mount.mountPoint}") or use another stick`,
    );
}
