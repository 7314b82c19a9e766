// One unit system for people across both CLIs: decimal, as disks and sticks are labelled.
import t from 'tap';
import { formatBytes } from '@offline-bundle/status';

t.test('decimal units: 1 GB is 10^9 bytes', async (t) => {
  t.equal(formatBytes(0), '0 B');
  t.equal(formatBytes(999), '999 B');
  t.equal(formatBytes(1000), '1.0 KB');
  t.equal(formatBytes(18.4e9), '18.4 GB', 'the number on a stick\'s label');
  t.equal(formatBytes(1024 ** 3), '1.1 GB', 'a GiB is not a GB');
  t.equal(formatBytes(5e15), '5000.0 TB', 'the largest unit keeps counting');
  t.notMatch(formatBytes(3 * 1024 ** 2), /iB/, 'never a binary unit');
});
