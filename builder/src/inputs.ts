import { OciError, type OciErrorCode, formatReference, parseReference } from '@offline-bundle/oci';
import { parseSourceSpec, type SourceSpec } from '@offline-bundle/image-fetch';
import { HostError, PIPE_READ_TIMEOUT_MS, readSmallFile } from '@offline-bundle/host';

/** Largest --images-file read: 1 MiB is some ten thousand references. */
const MAX_IMAGES_FILE_BYTES = 1024 * 1024;

/** An image source as given, and where: "--image #2" or "list.txt:14", for messages. */
export interface SourceLine {
  spec: string;
  where: string;
}

/**
 * The lines of an --images-file that name a source (comments and blank lines dropped), with
 * their line numbers. `signal` ends a wait on a pipe at once (its reason is thrown as it is).
 */
export async function readImagesFile(path: string, signal?: AbortSignal): Promise<SourceLine[]> {
  let text: string;
  try {
    // "-" is stdin; a pipe (<(cmd), stdin fed by one) is read as it comes, bounded in size and time
    text = (
      await readSmallFile(path === '-' ? '/dev/stdin' : path, MAX_IMAGES_FILE_BYTES, {
        pipe: { timeoutMs: PIPE_READ_TIMEOUT_MS, ...(signal ? { signal } : {}) },
      })
    ).bytes.toString('utf8');
  } catch (cause) {
    if (signal?.aborted) throw cause;
    const code =
      cause instanceof HostError && cause.code === 'INPUT_TIMEOUT'
        ? 'INPUT_TIMEOUT'
        : 'INVALID_CONFIG';
    throw new OciError(code, `cannot read --images-file ${path}: ${(cause as Error).message}`, {
      cause,
    });
  }
  return text
    .split('\n')
    .map((l, i) => ({
      spec: l.replace(/#.*$/, '').trim(),
      where: `${path === '-' ? 'stdin' : path}:${i + 1}`,
    }))
    .filter((l) => l.spec);
}

/** The name an image gets in the bundle when the source says it without being opened. */
function targetName(s: SourceSpec): string | undefined {
  if (s.transport === 'docker') return formatReference(parseReference(s.target));
  return s.name ? formatReference(parseReference(s.name)) : undefined;
}

/** Two specs for the same image (docker://x and x, a repeated line) are one source, not a clash. */
function sourceKey(s: SourceSpec): string {
  return s.transport === 'docker'
    ? `docker:${formatReference(parseReference(s.target))}`
    : `${s.transport}:${s.target}:${s.ref ?? ''}`;
}

/**
 * Checks every source before anything is fetched and reports every problem in one error: each
 * line that does not parse, and each target name that two different sources would both take
 * (one would silently replace the other). Returns the specs, each once; a source given again
 * ("FILE:5 repeats FILE:2") goes to `onRepeat`.
 */
export function checkSources(lines: SourceLine[], onRepeat?: (message: string) => void): string[] {
  const problems: string[] = [];
  const codes = new Set<string>();
  const byName = new Map<string, { key: string; where: string }>();
  const keys = new Map<string, string>();
  const specs: string[] = [];
  for (const l of lines) {
    let spec: SourceSpec;
    let name: string | undefined;
    try {
      spec = parseSourceSpec(l.spec);
      name = targetName(spec);
    } catch (err) {
      problems.push(`${l.where}: ${(err as Error).message}`);
      codes.add((err as OciError).code ?? 'INVALID_CONFIG');
      continue;
    }
    const key = sourceKey(spec);
    if (name) {
      const first = byName.get(name);
      if (first && first.key !== key) {
        problems.push(
          `${l.where}: ${name} is already the name of the image from ${first.where}; give one of them another name (=REGISTRY/REPO:TAG)`,
        );
        codes.add('DUPLICATE_NAME');
        continue;
      }
      byName.set(name, { key, where: l.where });
    }
    const first = keys.get(key);
    // harmless (kept once), but likely a slip in a long list: both lines named
    if (first !== undefined) {
      onRepeat?.(`${l.where} repeats ${first} (${l.spec}): kept once`);
      continue;
    }
    keys.set(key, l.where);
    specs.push(l.spec);
  }
  if (problems.length) {
    // one kind of problem keeps its own code (scripts branch on it); a mix is a bad input list
    const code = codes.size === 1 ? ([...codes][0] as OciErrorCode) : 'INVALID_CONFIG';
    throw new OciError(
      code,
      `${problems.length} bad image source${problems.length === 1 ? '' : 's'}, nothing fetched: ${problems.join('; ')}`,
    );
  }
  return specs;
}
