// tier: unit
// parseReference / formatReference: normalization the way docker and
// containers/image do it, and INVALID_REFERENCE for everything else.
import t from 'tap';
import {
  digestReference,
  formatReference,
  OciError,
  parseOciUrlReference,
  parseReference,
  repositoryName,
} from '@offline-bundle/oci';

const ociErr = (code: string) => ({ name: 'OciError', code });

const D = 'sha256:' + 'ab'.repeat(32);

t.test('short names are normalized to docker.io/library/NAME:latest', async (t) => {
  t.strictSame(parseReference('busybox'), {
    registry: 'docker.io',
    repository: 'library/busybox',
    tag: 'latest',
  });
  t.strictSame(parseReference('busybox:1.36'), {
    registry: 'docker.io',
    repository: 'library/busybox',
    tag: '1.36',
  });
  t.strictSame(
    parseReference('docker://busybox'),
    { registry: 'docker.io', repository: 'library/busybox', tag: 'latest' },
    'docker:// prefix is dropped',
  );
  t.strictSame(
    parseReference('  busybox  '),
    { registry: 'docker.io', repository: 'library/busybox', tag: 'latest' },
    'surrounding blanks are ignored',
  );
  t.equal(formatReference(parseReference('busybox')), 'docker.io/library/busybox:latest');
});

t.test(
  'docker.io namespaces: user repos keep their namespace, index.docker.io is docker.io',
  async (t) => {
    t.strictSame(
      parseReference('bitnami/redis'),
      { registry: 'docker.io', repository: 'bitnami/redis', tag: 'latest' },
      'first component without "." or ":" is a namespace, not a host',
    );
    t.strictSame(parseReference('docker.io/busybox'), {
      registry: 'docker.io',
      repository: 'library/busybox',
      tag: 'latest',
    });
    t.strictSame(parseReference('index.docker.io/busybox:1'), {
      registry: 'docker.io',
      repository: 'library/busybox',
      tag: '1',
    });
    t.strictSame(parseReference('docker.io/library/busybox'), {
      registry: 'docker.io',
      repository: 'library/busybox',
      tag: 'latest',
    });
    t.strictSame(parseReference('a/b/c'), {
      registry: 'docker.io',
      repository: 'a/b/c',
      tag: 'latest',
    });
  },
);

t.test('registries with a port, localhost and IPv6 literals', async (t) => {
  t.strictSame(
    parseReference('registry.example.com:5000/team/app'),
    { registry: 'registry.example.com:5000', repository: 'team/app', tag: 'latest' },
    'port is not mistaken for a tag',
  );
  t.strictSame(parseReference('registry.example.com:5000/team/app:v2'), {
    registry: 'registry.example.com:5000',
    repository: 'team/app',
    tag: 'v2',
  });
  t.strictSame(parseReference('localhost:5000/app'), {
    registry: 'localhost:5000',
    repository: 'app',
    tag: 'latest',
  });
  t.strictSame(
    parseReference('localhost/app:dev'),
    { registry: 'localhost', repository: 'app', tag: 'dev' },
    'bare localhost is a host',
  );
  t.strictSame(parseReference('127.0.0.1:5000/a/b'), {
    registry: '127.0.0.1:5000',
    repository: 'a/b',
    tag: 'latest',
  });
  t.strictSame(parseReference('[::1]:5000/app'), {
    registry: '[::1]:5000',
    repository: 'app',
    tag: 'latest',
  });
  t.strictSame(parseReference('quay.io/openshift-release-dev/ocp-release:4.15.3-x86_64'), {
    registry: 'quay.io',
    repository: 'openshift-release-dev/ocp-release',
    tag: '4.15.3-x86_64',
  });
});

t.test('digests, and tag plus digest', async (t) => {
  t.strictSame(
    parseReference(`quay.io/a/b@${D}`),
    { registry: 'quay.io', repository: 'a/b', digest: D },
    'no default tag when pinned',
  );
  t.strictSame(parseReference(`quay.io/a/b:v1@${D}`), {
    registry: 'quay.io',
    repository: 'a/b',
    tag: 'v1',
    digest: D,
  });
  t.strictSame(parseReference(`localhost:5000/app:v1@${D}`), {
    registry: 'localhost:5000',
    repository: 'app',
    tag: 'v1',
    digest: D,
  });
  t.strictSame(parseReference(`busybox@${D}`), {
    registry: 'docker.io',
    repository: 'library/busybox',
    digest: D,
  });
  const ref = parseReference(`quay.io/a/b:v1@${D}`);
  t.equal(formatReference(ref), `quay.io/a/b:v1@${D}`);
  t.equal(repositoryName(ref), 'quay.io/a/b');
  t.equal(digestReference(ref, D), `quay.io/a/b@${D}`);
});

t.test('separators allowed inside path components', async (t) => {
  t.strictSame(parseReference('quay.io/my_org/my-app.v2__x'), {
    registry: 'quay.io',
    repository: 'my_org/my-app.v2__x',
    tag: 'latest',
  });
  t.strictSame(
    parseReference('quay.io/a/b:V1.0_rc-1'),
    { registry: 'quay.io', repository: 'a/b', tag: 'V1.0_rc-1' },
    'tags may be upper case',
  );
});

const invalid: [string, string][] = [
  ['', 'empty'],
  ['   ', 'blank'],
  ['docker://', 'only the transport'],
  ['Busybox', 'upper-case short name'],
  ['quay.io/Org/app', 'upper-case namespace'],
  ['quay.io/org/App:v1', 'upper-case repository'],
  ['quay.io/org/app@sha256:abc', 'truncated digest'],
  [`quay.io/org/app@sha256:${'AB'.repeat(32)}`, 'upper-case digest hex'],
  [`quay.io/org/app@sha512:${'ab'.repeat(64)}`, 'non-sha256 digest'],
  ['quay.io/org/app@', 'empty digest'],
  ['quay.io/org/app:', 'empty tag'],
  ['quay.io/org/app:-bad', 'tag starting with "-"'],
  [`quay.io/org/app:${'x'.repeat(129)}`, 'tag longer than 128'],
  ['quay.io/org//app', 'empty path component'],
  ['quay.io/org/app/', 'trailing slash'],
  ['quay.io/-org/app', 'component starting with a separator'],
  ['quay.io/org/a..b', 'double dot separator'],
  ['quay.io/org/app b', 'space in name'],
  ['bad_host.io/app', 'underscore in host'],
  [`@${D}`, 'digest without a name'],
];
t.test('invalid references are INVALID_REFERENCE', async (t) => {
  for (const [input, why] of invalid) {
    t.throws(
      () => parseReference(input),
      ociErr('INVALID_REFERENCE'),
      `${why}: ${JSON.stringify(input)}`,
    );
  }
  try {
    parseReference('Busybox');
  } catch (err) {
    t.ok(err instanceof OciError, 'thrown value is an OciError instance');
  }
});

t.test(
  'oci:// names as Helm and ORAS read them: the first component is the host, always',
  async (t) => {
    t.strictSame(
      parseOciUrlReference('oci://registry/charts/demo:1.0'),
      { registry: 'registry', repository: 'charts/demo', tag: '1.0' },
      'a host without a dot is not a docker.io path',
    );
    t.strictSame(
      parseReference('registry/charts/demo:1.0').registry,
      'docker.io',
      "as parseReference (Docker's rule) reads it",
    );
    t.strictSame(
      parseOciUrlReference('oci://docker.io/demo:1.0'),
      { registry: 'docker.io', repository: 'demo', tag: '1.0' },
      'no library/ added',
    );
    t.strictSame(parseOciUrlReference(`oci://h:5000/c/demo@${D}`), {
      registry: 'h:5000',
      repository: 'c/demo',
      digest: D,
    });
    for (const bare of ['oci://registry', 'oci://registry:1.0', `oci://registry@${D}`]) {
      t.throws(
        () => parseOciUrlReference(bare),
        {
          code: 'INVALID_REFERENCE',
          message: /oci:\/\/HOST names no repository: give oci:\/\/HOST\/REPO\/NAME:VERSION/,
        },
        bare,
      );
    }
    t.throws(
      () => parseOciUrlReference('oci://bad_host/c/demo:1'),
      ociErr('INVALID_REFERENCE'),
      'a bad host is still refused',
    );
  },
);
