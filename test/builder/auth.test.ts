// Registry authentication for `bundle create`: htpasswd (Basic) and token (Bearer) auth on
// real docker-registry instances. The token service is a small node:http server issuing
// ES256 JWTs signed with a key whose self-signed certificate (made with the openssl CLI) is
// the registry's `rootcertbundle`; the JWT header carries the certificate as `x5c`, which
// distribution 2.8 checks against that bundle.
import t from 'tap';
import { createPrivateKey, randomBytes, sign, X509Certificate } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { startRegistry } from '../helpers/registry.mjs';
import { pushImage } from '../helpers/images.mjs';
import { tmpdir } from '../helpers/tmp.mjs';
import { bundle, bundleJson, errorCode, keygen, listDir, q, sh, writeAuthFile } from './lib.js';

const work = await tmpdir(t, 'ob-auth-');
const keys = await keygen(work);
const USER = 'alice';
const PASSWORD = 'wonderland';

let n = 0;
async function create(args: string[], env: Record<string, string> = {}) {
  const dir = path.join(work, `run-${++n}`);
  await mkdir(dir, { recursive: true });
  const output = path.join(dir, 'out', 'a.bundle');
  await mkdir(path.dirname(output));
  const r = await bundle(
    [
      'create',
      '--quiet',
      '--tls-verify=false',
      '--key',
      keys.key,
      '--version',
      '1.0',
      '--cache',
      path.join(dir, 'cache'),
      '-o',
      output,
      ...args,
    ],
    { env },
  );
  return { ...r, output, outDir: path.dirname(output) };
}

t.test('htpasswd (Basic) auth', async (t) => {
  const reg = await startRegistry({ htpasswd: { user: USER, password: PASSWORD } });
  t.teardown(() => reg.stop());
  const img = await pushImage(
    {
      tag: 'v1',
      platforms: [
        { os: 'linux', architecture: 'amd64', layers: [{ secret: 'behind basic auth' }] },
      ],
    },
    `${reg.host}/private/app:v1`,
    { creds: reg.creds },
  );

  const anon = await create(['--image', img.ref]);
  t.equal(anon.code, 1);
  t.equal(errorCode(anon.stderr), 'UNAUTHORIZED', 'no credentials');
  t.same(await listDir(anon.outDir), []);

  const authfile = await writeAuthFile(path.join(work, 'basic', 'auth.json'), reg.host, reg.creds!);
  const ok = await create(['--image', img.ref, '--authfile', authfile]);
  t.equal(ok.code, 0, ok.stderr);
  t.equal((await bundleJson(ok.output)).images[0]!.digest, img.digest);
  const v = await bundle(['verify', ok.output, '--key', keys.pub]);
  t.equal(v.code, 0, v.stderr);

  const wrong = await writeAuthFile(
    path.join(work, 'wrong', 'auth.json'),
    reg.host,
    `${USER}:not-the-password`,
  );
  const refused = await create(['--image', img.ref, '--authfile', wrong]);
  t.equal(errorCode(refused.stderr), 'UNAUTHORIZED', 'wrong password');

  const viaEnv = await create(['--image', img.ref], { REGISTRY_AUTH_FILE: authfile });
  t.equal(viaEnv.code, 0, `REGISTRY_AUTH_FILE is read by default: ${viaEnv.stderr}`);

  // containers-auth.json(5): the most specific key wins over the registry-wide one
  const scoped = path.join(work, 'scoped', 'auth.json');
  await mkdir(path.dirname(scoped));
  await writeFile(
    scoped,
    JSON.stringify({
      auths: {
        [reg.host]: { auth: Buffer.from(`${USER}:wrong`).toString('base64') },
        [`${reg.host}/private/app`]: { auth: Buffer.from(reg.creds!).toString('base64') },
      },
    }),
  );
  const byRepo = await create(['--image', img.ref, '--authfile', scoped]);
  t.equal(byRepo.code, 0, `repository-scoped credentials: ${byRepo.stderr}`);

  const broken = path.join(work, 'broken.json');
  await writeFile(broken, '{ not json');
  const bad = await create(['--image', img.ref, '--authfile', broken]);
  t.equal(errorCode(bad.stderr), 'INVALID_CONFIG', 'an auth file that is not JSON');
});

// ---- token auth -------------------------------------------------------------------------

const b64url = (b: Buffer | string) => Buffer.from(b).toString('base64url');

interface TokenServer {
  realm: string;
  requests: { user: string | null; scope: string[] }[];
  close: () => Promise<void>;
}

/** A token service as docker distribution expects one (docs: "Token Authentication Specification"). */
async function startTokenServer(
  keyPem: string,
  certPem: string,
  issuer: string,
  service: string,
): Promise<TokenServer> {
  const key = createPrivateKey(keyPem);
  const x5c = [new X509Certificate(certPem).raw.toString('base64')];
  const requests: TokenServer['requests'] = [];
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const scope = url.searchParams.getAll('scope');
    const authz = req.headers.authorization ?? '';
    const basic = authz.startsWith('Basic ')
      ? Buffer.from(authz.slice(6), 'base64').toString('utf8')
      : null;
    const user = basic?.slice(0, basic.indexOf(':')) ?? null;
    requests.push({ user, scope });
    if (url.pathname !== '/token' || url.searchParams.get('service') !== service) {
      res.writeHead(400).end();
      return;
    }
    if (basic !== `${USER}:${PASSWORD}`) {
      res
        .writeHead(401, { 'content-type': 'application/json' })
        .end('{"details":"bad credentials"}');
      return;
    }
    const now = Math.floor(Date.now() / 1000);
    const access = scope.flatMap((s) => {
      const [type, ...rest] = s.split(':');
      const actions = rest.pop() ?? '';
      return type === 'repository'
        ? [{ type, name: rest.join(':'), actions: actions.split(',').filter(Boolean) }]
        : [];
    });
    const header = b64url(JSON.stringify({ typ: 'JWT', alg: 'ES256', x5c }));
    const claims = b64url(
      JSON.stringify({
        iss: issuer,
        sub: user,
        aud: service,
        exp: now + 300,
        nbf: now - 30,
        iat: now - 30,
        jti: randomBytes(8).toString('hex'),
        access,
      }),
    );
    const signature = sign('sha256', Buffer.from(`${header}.${claims}`), {
      key,
      dsaEncoding: 'ieee-p1363',
    });
    const token = `${header}.${claims}.${b64url(signature)}`;
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        token,
        access_token: token,
        expires_in: 300,
        issued_at: new Date().toISOString(),
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    realm: `http://127.0.0.1:${port}/token`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

t.test('token (Bearer) auth', async (t) => {
  const dir = await tmpdir(t);
  const keyFile = path.join(dir, 'token.key');
  const certFile = path.join(dir, 'token.crt');
  const gen = await sh(
    `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ${q(keyFile)} -out ${q(certFile)} -days 2 -subj /CN=offline-bundle-test-token-issuer`,
  );
  t.equal(gen.code, 0, gen.stderr);
  const issuer = 'offline-bundle-test-issuer';
  const service = 'offline-bundle-test-registry';
  const tokens = await startTokenServer(
    await readFile(keyFile, 'utf8'),
    await readFile(certFile, 'utf8'),
    issuer,
    service,
  );
  t.teardown(() => tokens.close());
  const reg = await startRegistry({
    token: { realm: tokens.realm, service, issuer, rootcertbundle: certFile },
  });
  t.teardown(() => reg.stop());

  const challenge = await fetch(`http://${reg.host}/v2/`);
  t.match(
    challenge.headers.get('www-authenticate'),
    /^Bearer realm=/,
    'the registry asks for a bearer token',
  );
  const creds = `${USER}:${PASSWORD}`;
  const img = await pushImage(
    {
      tag: 'v1',
      platforms: [
        { os: 'linux', architecture: 'amd64', layers: [{ secret: 'behind token auth' }] },
      ],
    },
    `${reg.host}/tokened/app:v1`,
    { creds },
  );

  const before = tokens.requests.length;
  const anon = await create(['--image', img.ref]);
  t.equal(anon.code, 1);
  t.equal(errorCode(anon.stderr), 'UNAUTHORIZED', 'the token service refuses anonymous requests');
  t.same(await listDir(anon.outDir), []);
  t.ok(tokens.requests.length > before, 'the client went to the realm');

  const authfile = await writeAuthFile(path.join(dir, 'auth.json'), reg.host, creds);
  const mark = tokens.requests.length;
  const ok = await create(['--image', img.ref, '--authfile', authfile]);
  t.equal(ok.code, 0, ok.stderr);
  const m = await bundleJson(ok.output);
  t.equal(m.images[0]!.digest, img.digest);
  t.equal(m.blobs.length, 3);
  const asked = tokens.requests.slice(mark);
  t.ok(asked.length >= 1, 'a token was fetched');
  t.ok(
    asked.every((r) => r.user === USER && r.scope.includes('repository:tokened/app:pull')),
    'with the credentials and a pull scope for the repository',
  );
  t.ok(
    asked.length <= 2,
    `the token is reused for every request of the repository (${asked.length} token requests)`,
  );
  const v = await bundle(['verify', ok.output, '--key', keys.pub]);
  t.equal(v.code, 0, v.stderr);

  const wrong = await writeAuthFile(path.join(dir, 'wrong.json'), reg.host, `${USER}:nope`);
  const refused = await create(['--image', img.ref, '--authfile', wrong]);
  t.equal(errorCode(refused.stderr), 'UNAUTHORIZED', 'wrong password at the token service');
});
