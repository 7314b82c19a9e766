// reloadRuntime runs the configured command (systemctl reload crio in production; CRI-O is
// not installed here, so real programs with known outcomes stand in for it).
import { existsSync } from 'node:fs';
import t from 'tap';
import { reloadRuntime } from '@offline-bundle/runtime';

t.test('success', async (t) => {
  await reloadRuntime(['true']);
  await reloadRuntime(['sh', '-c', 'echo reloaded; exit 0']);
  t.pass('exit 0 resolves');
});

t.test('failure: RELOAD_FAILED with the first line of stderr', async (t) => {
  await t.rejects(
    reloadRuntime([
      'sh',
      '-c',
      'echo "Failed to reload crio.service: Unit crio.service not found." >&2; echo more >&2; exit 5',
    ]),
    {
      name: 'RuntimeError',
      code: 'RELOAD_FAILED',
      message:
        'sh -c echo "Failed to reload crio.service: Unit crio.service not found." >&2; echo more >&2; exit 5: Failed to reload crio.service: Unit crio.service not found.',
    },
  );
  await t.rejects(reloadRuntime(['false']), { code: 'RELOAD_FAILED', message: /exit code 1/ });
  await t.rejects(reloadRuntime(['/nonexistent/systemctl', 'reload', 'crio']), {
    code: 'RELOAD_FAILED',
    message: /cannot run .*ENOENT/,
  });
  await t.rejects(reloadRuntime(['sleep', '5'], { timeoutMs: 200 }), {
    code: 'RELOAD_FAILED',
    message: /did not finish/,
  });
  await t.rejects(reloadRuntime([]), { code: 'INVALID_SPEC' });
});

t.test(
  'systemctl is really asked when present',
  {
    skip:
      existsSync('/usr/bin/systemctl') || existsSync('/bin/systemctl')
        ? false
        : 'no systemctl here',
  },
  async (t) => {
    // systemd is not PID 1 here: systemctl exists but fails; the error must still be one line.
    const err = (await reloadRuntime([
      'systemctl',
      'reload',
      'crio-offline-bundle-test-nonexistent.service',
    ]).catch((e: unknown) => e)) as Error & { code?: string };
    if (!err) return t.pass('systemctl reload succeeded (unexpected but fine)');
    t.equal(err.code, 'RELOAD_FAILED');
    t.notMatch(err.message, /\n/, 'one line');
  },
);
