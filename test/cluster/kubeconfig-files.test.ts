// The files a kubeconfig names (certificate-authority, client-certificate, client-key,
// token-file) against the RBAC stand-in (test/helpers/kube-standin.ts): read bounded, regular
// files only, relative to the kubeconfig's directory; an exec plugin or an auth-provider's
// cmd-path refused with one line.
import t from 'tap';
import path from 'node:path';
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { BUNDLE_BIN, errorCode, run, sh } from '../builder/lib.js';
import { clusterFixture } from './lib.js';
import { HostileApi } from './hostile-api.js';

const { work, api, allReady } = await clusterFixture(t);
const dir = path.join(work, 'kc');
await mkdir(dir);
await copyFile(api.caFile, path.join(dir, 'ca.crt'));
await writeFile(path.join(dir, 'token'), 'admin-token\n');

const kubeconfig = async (name: string, user: string[]) => {
  const file = path.join(dir, name);
  await writeFile(
    file,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters: [{ name: c, cluster: { server: "' +
        api.url +
        '", certificate-authority: ca.crt } }]',
      'users:',
      '  - name: u',
      '    user:',
      ...user.map((l) => `      ${l}`),
      'contexts: [{ name: c, context: { cluster: c, user: u } }]',
      'current-context: c',
      '',
    ].join('\n'),
  );
  return file;
};
// `timeout`: before the bound a FIFO held the command forever
const status = (file: string) =>
  run(
    'timeout',
    [
      '30',
      process.execPath,
      BUNDLE_BIN,
      'cluster',
      'status',
      '--kubeconfig',
      file,
      '--request-timeout',
      '10',
    ],
    { cwd: work },
  );

t.test(
  "certificate-authority and token-file relative to the kubeconfig's directory (not the cwd)",
  async (t) => {
    allReady();
    const r = await status(await kubeconfig('relative', ['token-file: token']));
    t.equal(r.code, 0, r.stderr);
  },
);

t.test('a FIFO as client-certificate, an exec plugin: one line KUBECONFIG, at once', async (t) => {
  await sh(`mkfifo ${path.join(dir, 'fifo.crt')}`);
  const fifo = await status(
    await kubeconfig('fifo', ['client-certificate: fifo.crt', 'client-key: fifo.crt']),
  );
  t.equal(fifo.code, 1, fifo.stderr);
  t.equal(errorCode(fifo.stderr), 'KUBECONFIG', fifo.stderr);
  t.match(fifo.stderr, /client-certificate .*fifo\.crt: .*FIFO/);
  t.equal(fifo.stderr.trimEnd().split('\n').length, 1);
  const exec = await status(
    await kubeconfig('exec', [
      'exec: { apiVersion: client.authentication.k8s.io/v1, command: sleep, args: ["1000"] }',
    ]),
  );
  t.equal(exec.code, 1, exec.stderr);
  t.equal(errorCode(exec.stderr), 'KUBECONFIG', exec.stderr);
  t.match(exec.stderr, /exec plugin, which bundle cluster does not run/);
  t.equal(exec.stderr.trimEnd().split('\n').length, 1);
});

t.test(
  'an auth-provider that runs a command (gcp cmd-path) is one line KUBECONFIG at once; one with a static token is used',
  async (t) => {
    allReady();
    const started = Date.now();
    const gcp = await status(
      await kubeconfig('gcp-cmd', [
        'auth-provider: { name: gcp, config: { cmd-path: sleep, cmd-args: "100", token-key: "{.token}", expiry-key: "{.expiry}" } }',
      ]),
    );
    t.equal(gcp.code, 1, gcp.stderr);
    t.equal(errorCode(gcp.stderr), 'KUBECONFIG', gcp.stderr);
    t.match(gcp.stderr, /user u's auth-provider gcp runs a command \(cmd-path\).*oc create token/);
    t.equal(gcp.stderr.trimEnd().split('\n').length, 1);
    t.ok(Date.now() - started < 20_000, 'refused before running the command');
    // client-node sends a gcp access-token as it is while it has no expiry: nothing runs
    const token = await status(
      await kubeconfig('gcp-token', [
        'auth-provider: { name: gcp, config: { access-token: admin-token } }',
      ]),
    );
    t.equal(token.code, 0, token.stderr);
  },
);

t.test(
  'a kubectl proxy style server (plain http on 127.0.0.1, no insecure-skip-tls-verify) is used; plain http elsewhere is one line',
  async (t) => {
    const h = await HostileApi.start();
    t.teardown(() => h.close());
    h.attack = 'self-redirect';
    const write = async (name: string, server: string) => {
      const file = path.join(dir, name);
      await writeFile(
        file,
        `apiVersion: v1\nkind: Config\nclusters: [{ name: c, cluster: { server: "${server}" } }]\nusers: [{ name: u, user: {} }]\ncontexts: [{ name: c, context: { cluster: c, user: u } }]\ncurrent-context: c\n`,
      );
      return file;
    };
    const local = await status(await write('proxy', `http://127.0.0.1:${h.port}`));
    t.equal(errorCode(local.stderr), 'NODES_NOT_READY', local.stderr);
    t.match(local.stderr, 'no nodes match');
    const remote = await status(await write('remote', 'http://192.0.2.1:8001'));
    t.equal(errorCode(remote.stderr), 'KUBECONFIG', remote.stderr);
    t.match(
      remote.stderr,
      /server http:\/\/192\.0\.2\.1:8001 is plain http to another machine: use its https address/,
    );
    t.equal(remote.stderr.trimEnd().split('\n').length, 1);
  },
);
