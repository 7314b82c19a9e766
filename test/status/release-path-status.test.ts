// tier: unit
// status.bundle.path (#43): the releases of an update path a node loaded from one bundle, so
// `bundle cluster` sees them. toResource keeps a path the CRD (deploy/crd.yaml) accepts and
// leaves out, whole, one it would refuse; the CRD bounds it.
import t from 'tap';
import { emptyStatus, LIMITS, toResource, type NodeStatus } from '@offline-bundle/status';
import { MAX_RELEASE_PATH_HOPS } from '@offline-bundle/format';
import { compileSchema, crdSchema, loadCrd } from './lib.js';

const validate = compileSchema(crdSchema(await loadCrd()), { closed: true });
const withPath = (path: unknown): NodeStatus => ({
  ...emptyStatus('w1'),
  phase: 'Ready',
  bundle: { file: '/media/usb/path.bundle', version: '4.16.2', path } as NodeStatus['bundle'],
});

t.test('a path passes through and validates', async (t) => {
  t.equal(LIMITS.path, MAX_RELEASE_PATH_HOPS, 'the bound is the most releases a bundle carries');
  const o = toResource(withPath(['4.15.40', '4.16.2']), 'w1');
  t.same(o.status.bundle?.path, ['4.15.40', '4.16.2']);
  t.ok(validate(o), JSON.stringify(validate.errors));
  t.equal(
    toResource(withPath(undefined), 'w1').status.bundle?.path,
    undefined,
    'a bundle of one release has none',
  );
});

t.test('a path the CRD would refuse is left out whole, the rest of the status kept', async (t) => {
  const long = Array.from({ length: LIMITS.path + 1 }, (_, i) => `4.${14 + i}.0`);
  for (const [what, bad] of [
    ['one release', ['4.16.2']],
    ['more releases than a bundle carries', long],
    ['an empty version', ['', '4.16.2']],
    ['a version too long', ['4'.repeat(LIMITS.version + 1), '4.16.2']],
    ['not a list', '4.15.40 → 4.16.2'],
  ] as const) {
    const o = toResource(withPath(bad), 'w1');
    t.equal(o.status.bundle?.path, undefined, what);
    t.equal(o.status.bundle?.version, '4.16.2', `${what}: the bundle still named`);
    t.ok(validate(o), `${what}: the status still validates`);
  }
});

t.test('the CRD refuses what toResource leaves out', async (t) => {
  const raw = (path: unknown) => {
    const o = toResource(withPath(['4.15.40', '4.16.2']), 'w1');
    (o.status.bundle as unknown as Record<string, unknown>).path = path;
    return o;
  };
  t.ok(
    validate(raw(['4.14.30', '4.15.40', '4.16.2', '4.17.1'])),
    `${LIMITS.path} releases: the most a bundle carries`,
  );
  t.notOk(validate(raw(['4.14.30', '4.15.40', '4.16.2', '4.17.1', '4.18.0'])), 'more is refused');
  t.notOk(validate(raw(['4.16.2'])), 'a path of one release is refused');
  t.notOk(
    validate(raw(['x'.repeat(LIMITS.version + 1), '4.16.2'])),
    'a version past its bound is refused',
  );
});
