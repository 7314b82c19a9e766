// The agent's read-only registry (packages/registry) against real clients: skopeo copies
// from `bundle-agent serve` (over a bundle file through the seek index, and over an extracted
// layout, and over the parts of a split bundle) give the bundle's digests; the distribution API answers as the spec says.
import t from 'tap';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { request } from 'node:http';
import { tmpdir } from '../helpers/tmp.mjs';
import { skopeoCopy, skopeoInspectRaw } from '../helpers/registry.mjs';
import { writeImageLayout } from '../helpers/images.mjs';
import { AGENT, BUNDLE, keygen, run } from '../agent/fixtures.js';

interface Res {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}
function http(method: string, url: string, headers: Record<string, string> = {}): Promise<Res> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

async function serve(
  t: any,
  args: string[],
): Promise<{ address: string; line: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [AGENT, 'serve', ...args, '--json'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => {
    child.kill('SIGTERM');
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    err += d;
  });
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d;
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    child.on('exit', (code) => reject(new Error(`serve exited ${code}: ${err}`)));
  });
  return { address: JSON.parse(line).address, line, child };
}

t.test('bundle-agent serve', async (t) => {
  const dir = await tmpdir(t, 'ob-serve-');
  const keys = await keygen(dir);
  const layout = join(dir, 'src');
  await writeImageLayout(layout, {
    tag: 'a',
    platforms: [
      {
        os: 'linux',
        architecture: 'amd64',
        layers: [
          { 'a.txt': 'a' },
          { 'big.bin': createHash('sha512').update('x').digest().toString('hex').repeat(40_000) },
        ],
      },
    ],
  });
  await writeImageLayout(layout, {
    tag: 'm',
    platforms: [
      { os: 'linux', architecture: 'amd64', layers: [{ 'm.txt': 'm amd64' }] },
      { os: 'linux', architecture: 'arm64', layers: [{ 'm.txt': 'm arm64' }] },
    ],
  });
  const file = join(dir, 'x.bundle');
  const c = await run(BUNDLE, [
    'create',
    '--quiet',
    '--version',
    '1.0',
    '--all-platforms',
    '--image',
    `oci:${layout}:a=quay.io/acme/app:v1`,
    '--image',
    `oci:${layout}:m=registry.example.com:5000/team/multi:v2`,
    '--key',
    keys.key,
    '--cache',
    join(dir, 'cache'),
    '-o',
    file,
  ]);
  t.equal(c.code, 0, c.stderr);
  const manifest = JSON.parse(
    execFileSync('sh', ['-c', `zstd -dc '${file}' | tar -xO bundle.json`]).toString(),
  );
  const app = manifest.images.find((i: any) => i.repository === 'quay.io/acme/app');
  const multi = manifest.images.find(
    (i: any) => i.repository === 'registry.example.com:5000/team/multi',
  );

  const sources: [string, string[]][] = [['a bundle file (seek index)', [file, '--key', keys.pub]]];
  const extracted = join(dir, 'layout');
  const x = await run(BUNDLE, ['extract', file, extracted, '--key', keys.pub, '--quiet']);
  if (x.code === 0) sources.push(['an extracted layout', [extracted, '--key', keys.pub]]);
  else t.fail(`bundle extract failed: ${x.stderr}`);
  // split so that frames straddle parts: the seek index's random reads span two files
  const parts = join(dir, 'parts');
  const partSize = String(Math.ceil((await stat(file)).size / 5) | 1);
  const sp = await run(BUNDLE, ['split', file, '--size', partSize, '--out', parts, '--json']);
  if (sp.code === 0)
    sources.push([
      'the parts of a split bundle (read from part 2)',
      [JSON.parse(sp.stdout).parts[1], '--key', keys.pub],
    ]);
  else t.fail(`bundle split failed: ${sp.stderr}`);

  for (const [what, args] of sources) {
    t.test(`over ${what}`, async (t) => {
      const { address } = await serve(t, args);
      const base = `http://${address}`;

      t.test('skopeo reads by tag and digest and copies with identical digests', async (t) => {
        const byTag = await skopeoInspectRaw(`docker://${address}/quay.io/acme/app:v1`);
        t.equal('sha256:' + createHash('sha256').update(byTag).digest('hex'), app.digest, 'by tag');
        const byDigest = await skopeoInspectRaw(
          `docker://${address}/registry.example.com_5000/team/multi@${multi.digest}`,
        );
        t.equal(
          'sha256:' + createHash('sha256').update(byDigest).digest('hex'),
          multi.digest,
          'index by digest (port mapped to _)',
        );
        const out = join(dir, `copy-${Math.random().toString(36).slice(2)}`);
        await skopeoCopy(
          `docker://${address}/registry.example.com_5000/team/multi:v2`,
          `oci:${out}:x`,
          ['--all', '--preserve-digests'],
        );
        const index = JSON.parse(await readFile(join(out, 'index.json'), 'utf8'));
        t.equal(
          index.manifests[0].digest,
          multi.digest,
          'skopeo copy --all keeps the index digest',
        );
        for (const child of JSON.parse(byDigest.toString()).manifests) {
          const blob = await readFile(join(out, 'blobs/sha256', child.digest.slice(7)));
          t.equal(
            'sha256:' + createHash('sha256').update(blob).digest('hex'),
            child.digest,
            `platform ${child.platform.architecture} copied intact`,
          );
        }
      });

      t.test(
        'skopeo pulls by the name a user expects: the source path without its registry',
        async (t) => {
          const app1 = await skopeoInspectRaw(`docker://${address}/acme/app:v1`);
          t.equal(
            'sha256:' + createHash('sha256').update(app1).digest('hex'),
            app.digest,
            'quay.io/acme/app:v1 as ADDRESS/acme/app:v1',
          );
          const out = join(dir, `copy-${Math.random().toString(36).slice(2)}`);
          await skopeoCopy(`docker://${address}/team/multi@${multi.digest}`, `oci:${out}:x`, [
            '--all',
            '--preserve-digests',
          ]);
          t.equal(
            JSON.parse(await readFile(join(out, 'index.json'), 'utf8')).manifests[0].digest,
            multi.digest,
            'registry.example.com:5000/team/multi as ADDRESS/team/multi',
          );
          const tags = JSON.parse(
            (await http('GET', `${base}/v2/team/multi/tags/list`)).body.toString(),
          );
          t.same(tags, { name: 'team/multi', tags: ['v2'] });
        },
      );

      t.test('distribution API', async (t) => {
        const v2 = await http('GET', `${base}/v2/`);
        t.equal(v2.status, 200);
        t.equal(v2.headers['docker-distribution-api-version'], 'registry/2.0');

        const head = await http('HEAD', `${base}/v2/quay.io/acme/app/manifests/v1`);
        t.equal(head.status, 200);
        t.equal(head.headers['docker-content-digest'], app.digest);
        t.equal(head.headers['content-type'], app.mediaType);
        t.equal(head.body.length, 0, 'HEAD has no body');

        const layer = manifest.blobs
          .filter((b: any) => /layer/.test(b.mediaType))
          .sort((a: any, b: any) => b.size - a.size)[0];
        const full = await http('GET', `${base}/v2/quay.io/acme/app/blobs/${layer.digest}`);
        t.equal(full.status, 200);
        t.equal('sha256:' + createHash('sha256').update(full.body).digest('hex'), layer.digest);
        const part = await http('GET', `${base}/v2/quay.io/acme/app/blobs/${layer.digest}`, {
          range: 'bytes=100-5099',
        });
        t.equal(part.status, 206);
        t.equal(part.headers['content-range'], `bytes 100-5099/${layer.size}`);
        t.same(
          part.body,
          full.body.subarray(100, 5100),
          'Range returns exactly the bytes asked for',
        );
        const tail = await http('GET', `${base}/v2/quay.io/acme/app/blobs/${layer.digest}`, {
          range: 'bytes=-10',
        });
        t.same(tail.body, full.body.subarray(full.body.length - 10), 'suffix range');
        const bad = await http('GET', `${base}/v2/quay.io/acme/app/blobs/${layer.digest}`, {
          range: `bytes=${layer.size}-`,
        });
        t.equal(bad.status, 416);
        t.equal(bad.headers['content-range'], `bytes */${layer.size}`);

        const unknownBlob = await http(
          'GET',
          `${base}/v2/quay.io/acme/app/blobs/sha256:${'0'.repeat(64)}`,
        );
        t.equal(unknownBlob.status, 404);
        t.equal(JSON.parse(unknownBlob.body.toString()).errors[0].code, 'BLOB_UNKNOWN');
        const unknownManifest = await http('GET', `${base}/v2/quay.io/acme/app/manifests/nope`);
        t.equal(JSON.parse(unknownManifest.body.toString()).errors[0].code, 'MANIFEST_UNKNOWN');
        const unknownName = await http('GET', `${base}/v2/quay.io/acme/other/manifests/v1`);
        t.equal(JSON.parse(unknownName.body.toString()).errors[0].code, 'NAME_UNKNOWN');
        const tags = JSON.parse(
          (await http('GET', `${base}/v2/quay.io/acme/app/tags/list`)).body.toString(),
        );
        t.same(tags, { name: 'quay.io/acme/app', tags: ['v1'] });
        const catalog = JSON.parse((await http('GET', `${base}/v2/_catalog`)).body.toString());
        t.same(catalog.repositories, ['quay.io/acme/app', 'registry.example.com_5000/team/multi']);
        const page = await http('GET', `${base}/v2/_catalog?n=1`);
        t.same(JSON.parse(page.body.toString()).repositories, ['quay.io/acme/app']);
        t.match(String(page.headers.link), /last=quay\.io%2Facme%2Fapp&n=1>; rel="next"/);

        for (const m of ['PUT', 'POST', 'DELETE', 'PATCH']) {
          const r = await http(m, `${base}/v2/quay.io/acme/app/manifests/v1`);
          t.equal(r.status, 405, `${m} refused: read-only`);
        }
        for (const p of [
          '/v2/../../etc/passwd',
          '/v2/quay.io/acme/app/blobs/..%2F..%2Fbundle.json',
          '/v2/quay.io/acme/app/blobs/sha256:..%2F..%2F..%2Fetc%2Fpasswd',
          '/etc/passwd',
          '/v2/quay.io/acme/app/manifests/..%2Findex.json',
        ]) {
          const r = await http('GET', base + p);
          t.ok(r.status === 404 || r.status === 400, `${p} is not served (${r.status})`);
          t.notMatch(
            r.body.toString(),
            /root:|imageLayoutVersion|schemaVersion/,
            'no file content leaks',
          );
        }
      });
    });
  }
});

t.test(
  'serve: two registries with the same path are served by their registry-qualified names only; the short one is refused naming both',
  async (t) => {
    const dir = await tmpdir(t, 'ob-serve-names-');
    const keys = await keygen(dir);
    const layout = join(dir, 'src');
    await writeImageLayout(layout, {
      tag: 'a',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'a.txt': 'a' }] }],
    });
    await writeImageLayout(layout, {
      tag: 'b',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'b.txt': 'b' }] }],
    });
    await writeImageLayout(layout, {
      tag: 'c',
      platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'c.txt': 'c' }] }],
    });
    const file = join(dir, 'x.bundle');
    const c = await run(BUNDLE, [
      'create',
      '--quiet',
      '--version',
      '1.0',
      '--image',
      `oci:${layout}:a=127.0.0.1:5000/acme/app:v1`,
      '--image',
      `oci:${layout}:b=quay.io/acme/app:v2`,
      '--image',
      `oci:${layout}:c=127.0.0.1:5000/acme/tool:v3`,
      '--key',
      keys.key,
      '--cache',
      join(dir, 'cache'),
      '-o',
      file,
    ]);
    t.equal(c.code, 0, c.stderr);
    const manifest = JSON.parse(
      execFileSync('sh', ['-c', `zstd -dc '${file}' | tar -xO bundle.json`]).toString(),
    );
    const local = manifest.images.find((i: any) => i.repository === '127.0.0.1:5000/acme/app');
    const tool = manifest.images.find((i: any) => i.repository === '127.0.0.1:5000/acme/tool');
    const { address, line } = await serve(t, [file, '--key', keys.pub]);
    t.same(
      JSON.parse(line).repositories,
      [
        { source: '127.0.0.1:5000/acme/app', names: [`${address}/127.0.0.1_5000/acme/app`] },
        {
          source: '127.0.0.1:5000/acme/tool',
          names: [`${address}/acme/tool`, `${address}/127.0.0.1_5000/acme/tool`],
        },
        { source: 'quay.io/acme/app', names: [`${address}/quay.io/acme/app`] },
      ],
      'the names are printed at start',
    );
    const raw = await skopeoInspectRaw(`docker://${address}/127.0.0.1_5000/acme/app:v1`);
    t.equal(
      'sha256:' + createHash('sha256').update(raw).digest('hex'),
      local.digest,
      'the registry-qualified name',
    );
    const short = await skopeoInspectRaw(`docker://${address}/acme/tool:v3`);
    t.equal(
      'sha256:' + createHash('sha256').update(short).digest('hex'),
      tool.digest,
      'a path only one registry has is served short',
    );
    const refused = await http('GET', `http://${address}/v2/acme/app/manifests/v1`);
    t.equal(refused.status, 404);
    const err = JSON.parse(refused.body.toString()).errors[0];
    t.equal(err.code, 'NAME_UNKNOWN');
    t.match(
      err.message,
      /acme\/app is in this bundle from 2 registries: ask for one of 127\.0\.0\.1_5000\/acme\/app, quay\.io\/acme\/app/,
    );

    const text = spawn(process.execPath, [AGENT, 'serve', file, '--key', keys.pub], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    t.teardown(() => {
      text.kill('SIGTERM');
    });
    const printed = await new Promise<string>((resolve) => {
      let out = '';
      text.stdout!.on('data', (d: Buffer) => {
        out += d;
        if (out.split('\n').length > 4) resolve(out);
      });
    });
    t.match(
      printed,
      /^ {2}127\.0\.0\.1:5000\/acme\/tool: 127\.0\.0\.1:\d+\/acme\/tool or 127\.0\.0\.1:\d+\/127\.0\.0\.1_5000\/acme\/tool$/m,
      "the text output names each source's served names",
    );
  },
);

t.test(
  'serve --help prints the default address as a user writes it, and explains the names',
  async (t) => {
    const h = await run(AGENT, ['serve', '--help']);
    t.match(h.stdout, /default: a\s+free port on 127\.0\.0\.1/);
    t.notMatch(h.stdout, /"host"/);
    t.match(h.stdout, /ADDRESS\/PATH/);
  },
);

t.test('serve refuses an untrusted bundle', async (t) => {
  const dir = await tmpdir(t, 'ob-serve-bad-');
  const keys = await keygen(dir);
  const other = await keygen(dir, 'other');
  const layout = join(dir, 'src');
  await writeImageLayout(layout, {
    tag: 'a',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'a.txt': 'a' }] }],
  });
  const file = join(dir, 'x.bundle');
  await run(BUNDLE, [
    'create',
    '--quiet',
    '--version',
    '1.0',
    '--image',
    `oci:${layout}:a=quay.io/acme/app:v1`,
    '--key',
    keys.key,
    '--cache',
    join(dir, 'cache'),
    '-o',
    file,
  ]);
  const r = await run(AGENT, ['serve', file, '--key', other.pub]);
  t.not(r.code, 0);
  t.match(r.stderr, /^bundle-agent: UntrustedKey: /);
});

t.test('serve DIR refuses a layout whose blobs are not the signed bytes', async (t) => {
  const dir = await tmpdir(t, 'ob-serve-dir-');
  const keys = await keygen(dir);
  const layout = join(dir, 'src');
  await writeImageLayout(layout, {
    tag: 'a',
    platforms: [{ os: 'linux', architecture: 'amd64', layers: [{ 'a.txt': 'a' }] }],
  });
  const file = join(dir, 'x.bundle');
  await run(BUNDLE, [
    'create',
    '--quiet',
    '--version',
    '1.0',
    '--image',
    `oci:${layout}:a=quay.io/acme/app:v1`,
    '--key',
    keys.key,
    '--cache',
    join(dir, 'cache'),
    '-o',
    file,
  ]);
  const manifest = JSON.parse(
    execFileSync('sh', ['-c', `zstd -dc '${file}' | tar -xO bundle.json`]).toString(),
  );
  const config = manifest.blobs.find((b: any) => /config/.test(b.mediaType));
  const { writeFile: wf, rm: rmf, symlink } = await import('node:fs/promises');

  const swapped = join(dir, 'swapped');
  t.equal((await run(BUNDLE, ['extract', '--quiet', file, swapped, '--key', keys.pub])).code, 0);
  const secret = join(dir, 'secret');
  await wf(secret, Buffer.alloc(config.size, 0x41));
  await rmf(join(swapped, 'blobs/sha256', config.digest.slice(7)));
  await symlink(secret, join(swapped, 'blobs/sha256', config.digest.slice(7)));
  const r1 = await run(AGENT, ['serve', swapped, '--key', keys.pub]);
  t.not(r1.code, 0, 'a blob that is a symlink is refused');
  t.match(r1.stderr, /^bundle-agent: StagingFailed: .*not a regular file/);

  const altered = join(dir, 'altered');
  t.equal((await run(BUNDLE, ['extract', '--quiet', file, altered, '--key', keys.pub])).code, 0);
  await wf(join(altered, 'blobs/sha256', config.digest.slice(7)), Buffer.alloc(config.size, 0x42));
  const r2 = await run(AGENT, ['serve', altered, '--key', keys.pub]);
  t.not(r2.code, 0, 'a same-size blob with other bytes is refused');
  t.match(r2.stderr, /does not match its signed digest/);
});
