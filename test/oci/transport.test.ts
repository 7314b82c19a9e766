// tier: unit
// parseSourceSpec: "transport:rest[=NAME]" source specifications.
import t from 'tap';
import { parseSourceSpec } from '@offline-bundle/image-fetch';

const ociErr = (code: string) => ({ name: 'OciError', code });
const D = 'sha256:' + '12'.repeat(32);

t.test('docker:// references', async (t) => {
  t.strictSame(parseSourceSpec('docker://quay.io/a/b:v1'), {
    transport: 'docker',
    target: 'quay.io/a/b:v1',
    raw: 'docker://quay.io/a/b:v1',
  });
  t.strictSame(parseSourceSpec(`docker://quay.io/a/b@${D}`), {
    transport: 'docker',
    target: `quay.io/a/b@${D}`,
    raw: `docker://quay.io/a/b@${D}`,
  });
  t.strictSame(parseSourceSpec('docker://localhost:5000/app'), {
    transport: 'docker',
    target: 'localhost:5000/app',
    raw: 'docker://localhost:5000/app',
  });
  t.strictSame(parseSourceSpec('docker://busybox'), {
    transport: 'docker',
    target: 'busybox',
    raw: 'docker://busybox',
  });
  t.throws(
    () => parseSourceSpec('docker:busybox'),
    ociErr('UNSUPPORTED_TRANSPORT'),
    'docker: without //',
  );
  t.throws(
    () => parseSourceSpec('docker://Quay.io/A/B'),
    ociErr('INVALID_REFERENCE'),
    'the reference is validated',
  );
  t.throws(() => parseSourceSpec('docker://'), ociErr('INVALID_REFERENCE'), 'empty reference');
});

t.test('docker:// rejects =NAME: a registry image keeps its own name', async (t) => {
  t.throws(
    () => parseSourceSpec('docker://quay.io/a/b:v1=registry.local/x:y'),
    ociErr('INVALID_REFERENCE'),
  );
  t.throws(
    () => parseSourceSpec('quay.io/a/b:v1=registry.local/x:y'),
    ociErr('INVALID_REFERENCE'),
    'also without docker://',
  );
});

t.test('bare names are docker references', async (t) => {
  t.strictSame(
    parseSourceSpec('localhost:5000/app'),
    { transport: 'docker', target: 'localhost:5000/app', raw: 'localhost:5000/app' },
    'host:port is not a transport',
  );
  t.strictSame(
    parseSourceSpec('busybox:latest'),
    { transport: 'docker', target: 'busybox:latest', raw: 'busybox:latest' },
    'name:tag is not a transport',
  );
  t.strictSame(parseSourceSpec('registry.example.com:5000/team/app:v1'), {
    transport: 'docker',
    target: 'registry.example.com:5000/team/app:v1',
    raw: 'registry.example.com:5000/team/app:v1',
  });
  t.strictSame(parseSourceSpec('quay.io/a/b'), {
    transport: 'docker',
    target: 'quay.io/a/b',
    raw: 'quay.io/a/b',
  });
  t.strictSame(
    parseSourceSpec('  busybox  '),
    { transport: 'docker', target: 'busybox', raw: '  busybox  ' },
    'trimmed; raw kept as given',
  );
});

t.test('oci:DIR[:REF][=NAME]', async (t) => {
  t.strictSame(parseSourceSpec('oci:/data/layout'), {
    transport: 'oci',
    target: '/data/layout',
    raw: 'oci:/data/layout',
  });
  t.strictSame(parseSourceSpec('oci:/data/layout:v1'), {
    transport: 'oci',
    target: '/data/layout',
    ref: 'v1',
    raw: 'oci:/data/layout:v1',
  });
  t.strictSame(parseSourceSpec('oci:./rel/layout:v1=quay.io/org/app:1.0'), {
    transport: 'oci',
    target: './rel/layout',
    ref: 'v1',
    name: 'quay.io/org/app:1.0',
    raw: 'oci:./rel/layout:v1=quay.io/org/app:1.0',
  });
  t.strictSame(
    parseSourceSpec('oci:/data/layout=quay.io/org/app:1.0'),
    {
      transport: 'oci',
      target: '/data/layout',
      name: 'quay.io/org/app:1.0',
      raw: 'oci:/data/layout=quay.io/org/app:1.0',
    },
    '=NAME without :REF',
  );
  t.strictSame(
    parseSourceSpec('oci:/data/layout:registry.local:5000/a:v1'),
    {
      transport: 'oci',
      target: '/data/layout',
      ref: 'registry.local:5000/a:v1',
      raw: 'oci:/data/layout:registry.local:5000/a:v1',
    },
    'the path ends at the first ":"; the ref may contain ":"',
  );
  t.strictSame(parseSourceSpec(`oci:/l:v1=localhost:5000/app@${D}`), {
    transport: 'oci',
    target: '/l',
    ref: 'v1',
    name: `localhost:5000/app@${D}`,
    raw: `oci:/l:v1=localhost:5000/app@${D}`,
  });
  t.throws(() => parseSourceSpec('oci:'), ociErr('INVALID_REFERENCE'), 'a path is required');
  t.throws(
    () => parseSourceSpec('oci:=quay.io/a:b'),
    ociErr('INVALID_REFERENCE'),
    'a path is required before =NAME',
  );
});

t.test('oci-archive:FILE[:REF][=NAME]', async (t) => {
  t.strictSame(parseSourceSpec('oci-archive:/tmp/img.tar'), {
    transport: 'oci-archive',
    target: '/tmp/img.tar',
    raw: 'oci-archive:/tmp/img.tar',
  });
  t.strictSame(parseSourceSpec('oci-archive:/tmp/img.tar:latest=quay.io/a/b:1'), {
    transport: 'oci-archive',
    target: '/tmp/img.tar',
    ref: 'latest',
    name: 'quay.io/a/b:1',
    raw: 'oci-archive:/tmp/img.tar:latest=quay.io/a/b:1',
  });
  t.throws(() => parseSourceSpec('oci-archive:'), ociErr('INVALID_REFERENCE'));
});

t.test('docker-archive:FILE[:REF][=NAME]', async (t) => {
  t.strictSame(parseSourceSpec('docker-archive:/tmp/save.tar'), {
    transport: 'docker-archive',
    target: '/tmp/save.tar',
    raw: 'docker-archive:/tmp/save.tar',
  });
  t.strictSame(parseSourceSpec('docker-archive:/tmp/save.tar:busybox:latest'), {
    transport: 'docker-archive',
    target: '/tmp/save.tar',
    ref: 'busybox:latest',
    raw: 'docker-archive:/tmp/save.tar:busybox:latest',
  });
  t.strictSame(parseSourceSpec('docker-archive:save.tar=registry.local/app:v2'), {
    transport: 'docker-archive',
    target: 'save.tar',
    name: 'registry.local/app:v2',
    raw: 'docker-archive:save.tar=registry.local/app:v2',
  });
  t.throws(() => parseSourceSpec('docker-archive:'), ociErr('INVALID_REFERENCE'));
});

t.test('dir:PATH[=NAME]: the whole rest is the path (skopeo dir: has no :REF)', async (t) => {
  t.strictSame(parseSourceSpec('dir:/tmp/a:b=quay.io/x/y:v1'), {
    transport: 'dir',
    target: '/tmp/a:b',
    name: 'quay.io/x/y:v1',
    raw: 'dir:/tmp/a:b=quay.io/x/y:v1',
  });
  t.strictSame(parseSourceSpec('dir:rel'), { transport: 'dir', target: 'rel', raw: 'dir:rel' });
  t.throws(() => parseSourceSpec('dir:'), ociErr('INVALID_REFERENCE'));
});

t.test('unknown transports are UNSUPPORTED_TRANSPORT', async (t) => {
  t.throws(
    () => parseSourceSpec('containers-storage:a/b'),
    {
      ...ociErr('UNSUPPORTED_TRANSPORT'),
      message:
        /podman save --format oci-archive .*skopeo copy containers-storage:a\/b oci-archive:/,
    },
    'the error says how to export the image first',
  );
  t.throws(
    () => parseSourceSpec('docker-daemon:library/busybox:latest'),
    ociErr('UNSUPPORTED_TRANSPORT'),
  );
  t.throws(() => parseSourceSpec('ostree:/repo/x@/ostree'), ociErr('UNSUPPORTED_TRANSPORT'));
  t.throws(
    () => parseSourceSpec('docker-daemon:busybox:latest'),
    ociErr('UNSUPPORTED_TRANSPORT'),
    'docker-daemon:NAME:TAG',
  );
  t.throws(
    () => parseSourceSpec('containers-storage:busybox'),
    ociErr('UNSUPPORTED_TRANSPORT'),
    'containers-storage:NAME (never taken for a registry image)',
  );
});
