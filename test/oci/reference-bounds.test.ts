// tier: unit
// References are bounded before anything splits or resolves them (the distribution spec: a
// name of at most 255 characters, host included; a tag of at most 128), and the error line
// quotes at most MAX_QUOTED_CHARS of what was given.
import t, { type Test } from 'tap';
import { MAX_QUOTED_CHARS } from '@offline-bundle/host';
import { parseOciUrlReference, parseReference } from '@offline-bundle/oci';
import { parseSourceSpec } from '@offline-bundle/image-fetch';

const refused = (t: Test, f: () => unknown, why: RegExp) => {
  let message = '';
  t.throws(
    () => {
      try {
        f();
      } catch (e) {
        message = (e as Error).message;
        throw e;
      }
    },
    { name: 'OciError', code: 'INVALID_REFERENCE' },
  );
  t.match(message, why);
  t.ok(message.length < 1024, `${message.length} characters`);
  t.notMatch(message, /\n/);
  return message;
};

t.test('a 3 MiB name is refused at once, in a short line', async (t) => {
  const huge = 'a'.repeat(3 * 1024 * 1024);
  const started = performance.now();
  for (const input of [huge, `docker://${huge}:v1`, `quay.io/${huge}`])
    refused(
      t,
      () => parseReference(input),
      /longer than the 512 characters any reference a registry takes can be/,
    );
  refused(t, () => parseOciUrlReference(`oci://r.example.com/${huge}`), /longer than the 512/);
  refused(t, () => parseSourceSpec(`docker://${huge}`), /longer than the 512/);
  t.ok(performance.now() - started < 1000, 'no regular expression ran over the whole of it');
  t.match(
    refused(t, () => parseReference(huge), /./),
    new RegExp(`^invalid image reference "a{${MAX_QUOTED_CHARS}}…" \\(3145728 characters\\): `),
  );
});

t.test('host/repository of at most 255 characters, a tag of at most 128', async (t) => {
  const repo = (n: number) => `quay.io/${'r'.repeat(n - 'quay.io/'.length)}`;
  t.equal(parseReference(repo(255)).repository.length, 255 - 'quay.io/'.length, '255: taken');
  refused(
    t,
    () => parseReference(repo(256)),
    /is more than the 255 characters a registry takes for host\/repository/,
  );
  refused(t, () => parseReference(`${'r'.repeat(240)}`), /more than the 255/);
  t.equal(parseReference(`quay.io/a/b:${'t'.repeat(128)}`).tag?.length, 128, 'a tag of 128: taken');
  refused(t, () => parseReference(`quay.io/a/b:${'t'.repeat(129)}`), /bad tag "t+" \(at most 128 /);
});
