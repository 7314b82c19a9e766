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
