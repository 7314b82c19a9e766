import { OciError } from './errors.js';

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
  'os.version'?: string;
}

const ARCH_ALIASES: Record<string, string> = {
  x86_64: 'amd64',
  'x86-64': 'amd64',
  aarch64: 'arm64',
  armhf: 'arm',
  armel: 'arm',
  ppc64el: 'ppc64le',
};

export function normalizeArch(arch: string): string {
  return ARCH_ALIASES[arch] ?? arch;
}

/** The architectures images are published for (Go's GOARCH names, as the OCI image spec uses them): any other matches no image. */
export const KNOWN_ARCHES = [
  '386',
  'amd64',
  'arm',
  'arm64',
  'loong64',
  'mips',
  'mips64',
  'mips64le',
  'mipsle',
  'ppc64',
  'ppc64le',
  'riscv64',
  's390x',
  'wasm',
] as const;

/** Whether `arch` (or an alias of one, x86_64) is one images are published for. */
export const isKnownArch = (arch: string): boolean =>
  (KNOWN_ARCHES as readonly string[]).includes(normalizeArch(arch));

/** "linux/arm64/v8" or "arm64" (os defaults to linux). */
export function parsePlatform(value: string): Platform {
  const parts = value.split('/');
  if (parts.some((p) => !p))
    throw new OciError(
      'INVALID_REFERENCE',
      `invalid platform "${value}": use ARCH or OS/ARCH[/VARIANT]`,
    );
  if (parts.length === 1) return { os: 'linux', architecture: normalizeArch(parts[0]!) };
  if (parts.length > 3 || parts.some((p) => !p)) {
    throw new OciError(
      'INVALID_REFERENCE',
      `invalid platform "${value}": use ARCH or OS/ARCH[/VARIANT]`,
    );
  }
  const [os, arch, variant] = parts as [string, string, string | undefined];
  return { os, architecture: normalizeArch(arch), ...(variant ? { variant } : {}) };
}

export function formatPlatform(p: Platform): string {
  return [p.os, p.architecture, p.variant].filter(Boolean).join('/');
}

/** arm64 images mostly omit "v8"; treat a missing variant as matching the default one. */
export function platformMatches(want: Platform, have: Platform | undefined): boolean {
  if (!have) return false;
  if (want.os !== have.os || normalizeArch(want.architecture) !== normalizeArch(have.architecture))
    return false;
  if (!want.variant || !have.variant) return true;
  return want.variant === have.variant;
}
