// What the hostile-API test files start from: the stand-in, an admin kubeconfig for it, a
// signed bundle for prepare/upgrade, the four `bundle cluster` commands, and the loop that runs them per attack.
import path from 'node:path';
import { writeKubeconfig, tmpdir } from '../status/lib.js';
import { makeBundle } from './lib.js';
import { releaseKey, signRelease } from '../builder/release-signing.js';
import { errorCode, bundle } from '../builder/lib.js';
import { HostileApi, type Attack } from './hostile-api.js';

type T = Parameters<typeof tmpdir>[0];

export async function hostileSetup(t: T) {
  const work = await tmpdir(t, 'ob-hostile-api-');
  const h = await HostileApi.start();
  t.teardown(() => h.close());
  const kubeconfig = await writeKubeconfig(
    path.join(work, 'kubeconfig'),
    h.port,
    'admin-token',
    'http',
  );
  const key = await releaseKey();
  const b = await makeBundle(path.join(work, 'b'), {
    version: '4.15.1',
    upgradeFrom: ['4.15.0'],
    sign: async (d, ref) => [await signRelease(key, ref, d)],
  });
  const server = `http://127.0.0.1:${h.port}`;
  // --request-timeout 2: the deadline under test; the attacks without one never end on their own
  const commands: [string, string[]][] = [
    ['status', ['cluster', 'status']],
    ['prepare', ['cluster', 'prepare', b.file, '--key', b.pub]],
    ['upgrade', ['cluster', 'upgrade', b.file, '--key', b.pub]],
    ['rbac', ['cluster', 'rbac']],
  ];
  return { h, kubeconfig, server, commands };
}

/** An attack, the error code every command ends with, what its line says, and the --request-timeout it gets (default 2). */
export type Expected = [Attack, string, RegExp, string?];

/** Each attack a subtest: the four commands at once (one after another, a file outran tap's 300 s on CI), each one line CODE naming the server. */
export function everyCommandRefuses(
  t: T & { test(name: string, fn: (t: any) => Promise<void>): unknown },
  s: Awaited<ReturnType<typeof hostileSetup>>,
  expected: Expected[],
): void {
  const { h, kubeconfig, server, commands } = s;
  for (const [attack, code, message, timeout = '2'] of expected) {
    t.test(
      `hostile API stand-in, ${attack}: every command ends with one line ${code}`,
      async (t) => {
        h.attack = attack;
        const results = await Promise.all(
          commands.map(([, args]) =>
            bundle([...args, '--kubeconfig', kubeconfig, '--request-timeout', timeout]),
          ),
        );
        for (const [i, [name]] of commands.entries()) {
          const r = results[i]!;
          t.equal(r.code, 1, `${name}: exit 1`);
          t.equal(
            r.stderr.trimEnd().split('\n').length,
            1,
            `${name}: one line (${r.stderr.slice(0, 300)})`,
          );
          t.equal(errorCode(r.stderr), code, `${name}: ${r.stderr.slice(0, 300)}`);
          t.match(r.stderr, message, name);
          t.match(r.stderr, server, `${name} names the server`);
        }
        t.equal(h.elsewhereHits, 0, 'the other server was never asked');
      },
    );
  }
}
