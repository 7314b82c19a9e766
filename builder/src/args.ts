import { InvalidArgumentError } from 'commander';
import { isDigest } from '@offline-bundle/oci';

/** A repeatable option's values, in order. */
export const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

/** sha256:<hex> (or bare hex) as given to --digest. */
export const digestArg = (value: string): string => {
  const d = value.startsWith('sha256:') ? value : `sha256:${value}`;
  if (!isDigest(d)) throw new InvalidArgumentError('must be sha256:<64 hex digits> (see NAME.bundle.sha256)');
  return d;
};

/** A number of seconds for a time bound: more than 0, at most an hour. */
export const secondsArg = (value: string): number => {
  const n = Number(value);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(value) || !(n > 0) || n > 3600) throw new InvalidArgumentError('must be a number of seconds, more than 0 and at most 3600');
  return n;
};

export const positiveInt = (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('must be a whole number of at least 1');
  return n;
};
// a flag as skopeo's: bare (true) or =VALUE with the values of Go's strconv.ParseBool; a bare
// one never takes the next option as its value
const BOOL_VALUES: Record<string, boolean> = {
  1: true, t: true, T: true, TRUE: true, true: true, True: true,
  0: false, f: false, F: false, FALSE: false, false: false, False: false,
};
export const boolArg = (value: string) => {
  const v = Object.hasOwn(BOOL_VALUES, value) ? BOOL_VALUES[value] : undefined;
  if (v === undefined) throw new InvalidArgumentError('must be true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False, as skopeo; write --tls-verify=false)');
  return v;
};
