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
