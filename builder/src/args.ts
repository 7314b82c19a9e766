import { InvalidArgumentError } from 'commander';
import { isDigest } from '@offline-bundle/oci';

/** A repeatable option's values, in order. */
export const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

/** sha256:<hex> (or bare hex) as given to --digest. */
export const digestArg = (value: string): string => {
  const d = value.startsWith('sha256:') ? value : `sha256:${value}`;
  if (!isDigest(d))
    throw new InvalidArgumentError('must be sha256:<64 hex digits> (see NAME.bundle.sha256)');
  return d;
};

/** A number of seconds for a time bound: more than 0, at most an hour. */
export const secondsArg = (value: string): number => {
  const n = Number(value);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(value) || !(n > 0) || n > 3600)
    throw new InvalidArgumentError('must be a number of seconds, more than 0 and at most 3600');
  return n;
};

export const positiveInt = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new InvalidArgumentError('must be a whole number of at least 1');
  return n;
};
// a flag as skopeo's: bare (true) or =VALUE with the values of Go's strconv.ParseBool; a bare
// one never takes the next option as its value
const BOOL_VALUES: Record<string, boolean> = {
  1: true,
  t: true,
  T: true,
  TRUE: true,
  true: true,
  True: true,
  0: false,
  f: false,
  F: false,
  FALSE: false,
  false: false,
  False: false,
};
export const boolArg = (value: string) => {
  const v = Object.hasOwn(BOOL_VALUES, value) ? BOOL_VALUES[value] : undefined;
  if (v === undefined)
    throw new InvalidArgumentError(
      'must be true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False, as skopeo; write --tls-verify=false)',
    );
  return v;
};

// how far a guess may be from what was typed: commander's bounds for a mistyped flag
const MAX_EDITS = 3;
const MIN_SIMILARITY = 0.4;

/** Edits (insert, delete, replace, swap two neighbours) between two words, MAX_EDITS and up counted as many. */
function editDistance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > MAX_EDITS) return Math.max(a.length, b.length);
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i]![j] = Math.min(
        d[i - 1]![j]! + 1,
        d[i]![j - 1]! + 1,
        d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * "; did you mean X?" for a word that is none of `candidates`, as commander says it of a
 * mistyped flag (the same bounds); '' when nothing is close. Case and - or _ are not counted,
 * so a flag's spelling (tls-verify) finds its key (tlsVerify).
 */
export function didYouMean(word: string, candidates: readonly string[]): string {
  const plain = (s: string) => s.toLowerCase().replace(/[-_]/g, '');
  let best: string[] = [];
  let bestDistance = MAX_EDITS;
  for (const c of new Set(candidates)) {
    if (c.length <= 1) continue;
    const distance = editDistance(plain(word), plain(c));
    const length = Math.max(word.length, c.length);
    if ((length - distance) / length <= MIN_SIMILARITY) continue;
    if (distance < bestDistance) [best, bestDistance] = [[c], distance];
    else if (distance === bestDistance) best.push(c);
  }
  best.sort();
  return best.length
    ? `; did you mean ${best.length > 1 ? `one of ${best.join(', ')}` : best[0]}?`
    : '';
}
