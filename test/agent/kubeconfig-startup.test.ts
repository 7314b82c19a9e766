// `bundle-agent run` with a status.kubeconfig it cannot use stops at once with one line naming
// the file and the fix; before, the reporter retried it in the background for ever (and each
// stop waited 5 s for a status it could never send). A kubeconfig not there yet is still waited for.
import t from 'tap';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { AGENT, keygen, nodeRoot, run } from './fixtures.js';

const dir = await tmpdir(t, 'ob-kubeconfig-');
const keys = await keygen(dir);

async function node(name: string, kubeconfig?: string): Promise<string> {
  const root = join(dir, name);
  await mkdir(join(root, 'var/lib/kubelet'), { recursive: true });
  if (kubeconfig !== undefined)
    await writeFile(join(root, 'var/lib/kubelet/kubeconfig'), kubeconfig);
  return nodeRoot(
    root,
    keys.pub,
    'runtime: containerd\nversion:\n  current: "1.0.0"\nstatus:\n  kubeconfig: /var/lib/kubelet/kubeconfig\n  console: false\nspace:\n  reserveBytes: 0\n',
  );
}

for (const [what, text, cause] of [
  ['not YAML', 'this: is: not: [yaml\n', /Nested mappings/],
  [
    'no cluster',
    'apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n',
    /names no cluster/,
  ],
] as const) {
  t.test(`a kubeconfig with ${what}: one InvalidConfig line at once`, async (t) => {
    const config = await node(what.replace(/\W/g, '-'), text);
    // before: the daemon ran on, retrying; the run's own timeout ends it
    const started = Date.now();
    const r = await run(AGENT, ['run', '--config', config], process.env, 30_000);
    t.equal(r.code, 1, r.stderr);
    t.ok(Date.now() - started < 20_000, 'before the daemon starts');
    const lines = r.stderr.trimEnd().split('\n');
    t.equal(lines.length, 1, r.stderr);
    t.match(
      lines[0],
      /^bundle-agent: InvalidConfig: .*config\.yaml: status\.kubeconfig: \/.*\/var\/lib\/kubelet\/kubeconfig cannot be used \(.*\): fix it .* or remove status\.kubeconfig/,
    );
    t.match(lines[0], cause);
  });
}

t.test(
  'a kubeconfig not written yet is waited for (the kubelet writes it at bootstrap)',
  async (t) => {
    const config = await node('absent');
    // ended by the run's timeout (SIGTERM): it had started, and stops as asked
    const r = await run(AGENT, ['run', '--config', config], process.env, 4000);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stderr, /bundle-agent watching .* event=start/);
    t.notMatch(r.stderr, /InvalidConfig/);
  },
);
