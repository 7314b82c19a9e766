// The fuzz loop, run as a child of test/fuzz/run.mjs (which catches hangs and crashes of this
// process). Builds the base bundle, then for each case index: mutates it with the case's own
// seeded Rng, runs the mutation through verifyBundle, extractBundle, BundleRandomReader (and
// for the agent sample `bundle-agent load`), and writes one JSON line per case to stdout.
//
//   node test/fuzz/worker.mjs --seed S --from I --to J --levels byte,frame --agent-cases 3,57 --case-timeout 10000
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  BUNDLE_JSON,
  BundleRandomReader,
  FormatError,
  OCI_LAYOUT_CONTENT,
  SIGNATURE,
  blobPath,
  extractBundle,
  parseManifestBytes,
  verifyBundle,
  withBundleFile,
} from '@offline-bundle/format';
import { BASE_FROM, Rng, makeBaseBundle, splitBundle } from './bundle.mjs';
import { MUTATORS, prepareBase } from './mutate.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const AGENT = path.join(ROOT, 'agent/bin/bundle-agent.js');

// The codes a rejection may carry: exactly the union in packages/format/src/errors.ts.
const CODES = new Set(
  [
    ...readFileSync(path.join(ROOT, 'packages/format/src/errors.ts'), 'utf8').matchAll(
      /\|\s*'([A-Z_]+)'/g,
    ),
  ].map((m) => m[1]),
);

const { values: opt } = parseArgs({
  options: {
    seed: { type: 'string', default: '1' },
    from: { type: 'string', default: '0' },
    to: { type: 'string', default: '1000' },
    only: { type: 'string' },
    levels: { type: 'string', default: 'byte,frame,seek,tar,json' },
    'agent-cases': { type: 'string', default: '' },
    'case-timeout': { type: 'string', default: '10000' },
    'agent-timeout': { type: 'string', default: '60000' },
    'no-big-layer': { type: 'boolean', default: false },
  },
});
const seed = opt.seed;
const levels = opt.levels
  .split(',')
  .map((s) => s.trim())
  .filter(Boolean);
const caseTimeout = Number(opt['case-timeout']);
const agentTimeout = Number(opt['agent-timeout']);
const agentCases = new Set(opt['agent-cases'].split(',').filter(Boolean).map(Number));

const emit = (msg) => process.stdout.write(JSON.stringify(msg) + '\n');
const maxRssKiB = () => process.resourceUsage().maxRSS;

// ---------------------------------------------------------------------------------------------
// Outcome of one call: accepted, rejected with a typed code, or a finding (crash, hang).

let current; // the case being run, for errors that escape every await
process.on('uncaughtException', (err) => {
  (current?.findings ?? orphanFindings).push({
    kind: 'crash',
    where: 'uncaughtException',
    detail: describe(err),
  });
});
process.on('unhandledRejection', (err) => {
  (current?.findings ?? orphanFindings).push({
    kind: 'crash',
    where: 'unhandledRejection',
    detail: describe(err),
  });
});
const orphanFindings = [];

function describe(err) {
  if (!(err instanceof Error)) return `non-Error thrown: ${String(err).slice(0, 200)}`;
  const at = (err.stack ?? '')
    .split('\n')
    .slice(1, 4)
    .map((l) => l.trim())
    .join(' | ');
  return `${err.name}${err.code ? ` [${err.code}]` : ''}: ${err.message.slice(0, 300)} ${at ? `(${at})` : ''}`;
}

class Timeout extends Error {}

/** Runs fn(signal) with the per-case time bound: the signal aborts at the bound, and the call is abandoned shortly after. */
async function bounded(fn, ms = caseTimeout) {
  const ac = new AbortController();
  const err = new Timeout(`no answer within ${ms} ms`);
  let timer;
  let hardTimer;
  const abandon = new Promise((_, reject) => {
    timer = setTimeout(() => ac.abort(err), ms);
    hardTimer = setTimeout(() => reject(err), ms + 2000);
  });
  const t0 = performance.now();
  try {
    const value = await Promise.race([fn(ac.signal), abandon]);
    return { ok: true, value, ms: performance.now() - t0 };
  } catch (error) {
    return { ok: false, error, ms: performance.now() - t0 };
  } finally {
    clearTimeout(timer);
    clearTimeout(hardTimer);
  }
}

/** Classifies a rejection: its code, or a finding when it is untyped or a timeout. */
function judgeRejection(res, where, findings) {
  const e = res.error;
  if (e instanceof Timeout || e === undefined) {
    findings.push({ kind: 'hang', where, detail: `no result within ${caseTimeout} ms` });
    return 'HANG';
  }
  if (e instanceof FormatError && CODES.has(e.code)) return e.code;
  findings.push({ kind: 'crash', where, detail: `untyped rejection: ${describe(e)}` });
  return `UNTYPED:${e?.name ?? typeof e}`;
}

// ---------------------------------------------------------------------------------------------
// Layout comparisons

/** Every path under dir (files and directories), with lstat kinds; symlinks are not followed. */
async function walk(dir, rel = '') {
  const out = [];
  for (const name of (await readdir(path.join(dir, rel))).sort()) {
    const r = rel ? `${rel}/${name}` : name;
    const st = await lstat(path.join(dir, r));
    if (st.isDirectory()) {
      out.push({ path: r, kind: 'dir' });
      out.push(...(await walk(dir, r)));
    } else
      out.push({ path: r, kind: st.isFile() ? 'file' : st.isSymbolicLink() ? 'symlink' : 'other' });
  }
  return out;
}

/** Differences between an extracted layout and the original one, byte for byte; [] when identical. */
async function diffLayout(dir, original) {
  const diffs = [];
  const seen = new Set();
  for (const e of await walk(dir)) {
    if (e.kind === 'dir') {
      if (e.path !== 'blobs' && e.path !== 'blobs/sha256')
        diffs.push(`unexpected directory ${e.path}`);
      continue;
    }
    if (e.kind !== 'file') {
      diffs.push(`${e.path} is a ${e.kind}`);
      continue;
    }
    seen.add(e.path);
    const want = original.get(e.path);
    if (!want) {
      diffs.push(`unexpected file ${e.path}`);
      continue;
    }
    if (!(await readFile(path.join(dir, e.path))).equals(want))
      diffs.push(`${e.path} differs from the original`);
  }
  for (const p of original.keys()) if (!seen.has(p)) diffs.push(`${p} missing`);
  return diffs;
}

/**
 * For a bundle whose bundle.json was re-signed (trusted by definition): the layout holds exactly
 * the listed files, every blob hashes to its name and listed size, index.json to the listed
 * digest, and nothing else is there.
 */
async function checkResignedLayout(dir, manifestBytes) {
  const diffs = [];
  const m = parseManifestBytes(manifestBytes);
  const listed = new Map([
    ['oci-layout', null],
    ['index.json', m.index],
    [BUNDLE_JSON, null],
    [SIGNATURE, null],
  ]);
  for (const b of m.blobs) listed.set(blobPath(b.digest), b);
  const seen = new Set();
  for (const e of await walk(dir)) {
    if (e.kind === 'dir') {
      if (e.path !== 'blobs' && e.path !== 'blobs/sha256')
        diffs.push(`unexpected directory ${e.path}`);
      continue;
    }
    if (e.kind !== 'file') {
      diffs.push(`${e.path} is a ${e.kind}`);
      continue;
    }
    seen.add(e.path);
    if (!listed.has(e.path)) {
      diffs.push(`unlisted file ${e.path}`);
      continue;
    }
    const bytes = await readFile(path.join(dir, e.path));
    const want = listed.get(e.path);
    if (e.path === 'oci-layout' && bytes.toString() !== OCI_LAYOUT_CONTENT)
      diffs.push('oci-layout content altered');
    if (e.path === BUNDLE_JSON && !bytes.equals(manifestBytes))
      diffs.push('bundle.json is not the signed one');
    if (want) {
      const d = 'sha256:' + createHash('sha256').update(bytes).digest('hex');
      if (d !== want.digest || bytes.length !== want.size)
        diffs.push(
          `${e.path} hashes to ${d} (${bytes.length} bytes), listed ${want.digest} (${want.size})`,
        );
      if (e.path.startsWith('blobs/sha256/') && d !== `sha256:${e.path.slice(13)}`)
        diffs.push(`${e.path} does not hash to its name`);
    }
  }
  for (const p of listed.keys()) if (!seen.has(p)) diffs.push(`listed ${p} missing`);
  return diffs;
}

// ---------------------------------------------------------------------------------------------
// bundle-agent load

async function runAgent(file, dir, pubPem) {
  const root = path.join(dir, 'node');
  await mkdir(path.join(root, 'etc/bundle-agent/keys'), { recursive: true });
  await writeFile(path.join(root, 'etc/bundle-agent/keys/factory.pub'), pubPem);
  const config = path.join(root, 'etc/bundle-agent/config.yaml');
  await writeFile(
    config,
    `root: ${root}
nodeName: fuzz-node
arch: amd64
runtime: crio
trust:
  keys: [/etc/bundle-agent/keys/factory.pub]
version:
  current: "${BASE_FROM}"
space:
  reserveBytes: 0
staging:
  keep: true
preload:
  method: none
reload:
  command: ["true"]
`,
  );
  const t0 = performance.now();
  const r = await new Promise((resolve) => {
    const child = spawn(process.execPath, [AGENT, 'load', file, '--config', config, '--json'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: agentTimeout,
      killSignal: 'SIGKILL',
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.on('error', (err) => resolve({ code: null, signal: null, stdout, stderr: String(err) }));
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  let result;
  try {
    result = JSON.parse(r.stdout.trim().split('\n').pop() ?? '');
  } catch {
    /* judged below */
  }
  return { ...r, result, root, ms: performance.now() - t0 };
}

// ---------------------------------------------------------------------------------------------

// tmpfs when there is one: thousands of small extractions, each ending in fsyncs (writeFileAtomic)
const tmpRoot = process.env.FUZZ_TMPDIR ?? (existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir());
const work = await mkdtemp(path.join(tmpRoot, 'ob-fuzz-'));
const cleanup = () => {
  try {
    rmSync(work, { recursive: true, force: true });
  } catch {
    /* best effort */
  }
};
process.on('exit', cleanup);
for (const sig of ['SIGINT', 'SIGTERM'])
  process.on(sig, () => {
    cleanup();
    process.exit(130);
  });

const made = await makeBaseBundle(path.join(work, 'base'), { bigLayer: !opt['no-big-layer'] });
const split = await splitBundle(made.path);
const trust = { keys: [made.key.trusted] };
const baseVerified = await withBundleFile(made.path, (s) => verifyBundle(s, { trust }));
const base = prepareBase({
  bytes: made.bytes,
  ...split,
  key: made.key,
  manifestBytes: baseVerified.manifestBytes,
  signature: baseVerified.signature,
  manifest: baseVerified.manifest,
  digest: baseVerified.fileDigest,
});
// The original layout, byte for byte: what an accepted, unre-signed mutation must extract to.
const baseTarget = path.join(work, 'base-layout');
await withBundleFile(made.path, (s) => extractBundle(s, baseTarget, { trust, fsync: false }));
const original = new Map();
for (const e of await walk(baseTarget))
  if (e.kind === 'file') original.set(e.path, await readFile(path.join(baseTarget, e.path)));

emit({
  type: 'init',
  pid: process.pid,
  bundle: {
    digest: base.digest,
    size: base.bytes.length,
    frames: base.segs.length,
    entries: base.entries.length,
  },
  codes: [...CODES],
  maxRssKiB: maxRssKiB(),
});

// Sanity: the base bundle itself passes every check (else the harness, not the product, is broken).
if (agentCases.size > 0 && opt.from === '0') {
  const dir = path.join(work, 'base-agent');
  await mkdir(dir);
  const a = await runAgent(made.path, dir, made.key.publicPem);
  if (a.code !== 0 || !a.result?.ready) {
    emit({
      type: 'fatal',
      error: `the unmutated bundle does not load with bundle-agent: ${a.stderr.slice(-800)} ${a.stdout.slice(-400)}`,
    });
    process.exit(2);
  }
  emit({ type: 'baseline', agentMs: Math.round(a.ms) });
}

/** Paths a traversal in a mutated name would write to: `evil` beside every ancestor of the case dir. */
function escapeProbes(dir) {
  const probes = [];
  for (let d = dir; ; d = path.dirname(d)) {
    probes.push(path.join(d, 'evil'), path.join(d, 'tmp', 'evil'), path.join(d, 'etc', 'evil'));
    if (path.dirname(d) === d) break;
  }
  return probes;
}

async function runCase(i) {
  const rng = new Rng(seed, i);
  const level = levels[i % levels.length];
  const findings = [];
  current = { findings };
  let m;
  try {
    m = MUTATORS[level](rng, base);
  } catch (err) {
    return { i, level, desc: '(mutation failed)', harnessError: describe(err), findings };
  }
  const dir = path.join(work, `case-${i}`);
  await mkdir(dir);
  const file = path.join(dir, 'case.bundle');
  await writeFile(file, m.bytes);
  const resigned = m.resigned?.manifestBytes;
  const identicalFile = m.bytes.equals(base.bytes);
  const out = {
    i,
    level,
    desc: m.desc,
    resigned: !!resigned,
    size: m.bytes.length,
    identicalFile,
    findings,
    ms: {},
  };

  // 1. verifyBundle
  const v = await bounded((signal) =>
    withBundleFile(file, (s) => verifyBundle(s, { trust, signal })),
  );
  out.ms.verify = Math.round(v.ms);
  if (v.ok) {
    const want = resigned ?? base.manifestBytes;
    if (!v.value.manifestBytes.equals(want))
      findings.push({
        kind: 'accepted-altered',
        where: 'verifyBundle',
        detail: 'accepted with a bundle.json other than the signed one',
      });
    out.verify = 'accepted';
  } else out.verify = judgeRejection(v, 'verifyBundle', findings);

  // 2. extractBundle into DIR/out/target: DIR/out holds `target` or nothing afterwards
  const outDir = path.join(dir, 'out');
  await mkdir(outDir);
  const target = path.join(outDir, 'target');
  const x = await bounded((signal) =>
    withBundleFile(file, (s) => extractBundle(s, target, { trust, fsync: false, signal })),
  );
  out.ms.extract = Math.round(x.ms);
  if (x.ok) {
    out.extract = 'accepted';
    const diffs = resigned
      ? await checkResignedLayout(target, resigned)
      : await diffLayout(target, original);
    if (diffs.length)
      findings.push({
        kind: 'accepted-altered',
        where: 'extractBundle',
        detail: diffs.slice(0, 5).join('; '),
      });
  } else out.extract = judgeRejection(x, 'extractBundle', findings);
  const left = await readdir(outDir);
  const allowed = x.ok ? ['target'] : [];
  const stray = left.filter((n) => !allowed.includes(n));
  if (!x.ok && left.includes('target') && (await readdir(target)).length === 0)
    stray.splice(stray.indexOf('target'), 1);
  if (stray.length)
    findings.push({
      kind: 'written-outside',
      where: 'extractBundle',
      detail: `left beside the target: ${stray.join(', ')}`,
    });
  for (const p of escapeProbes(outDir)) {
    if (existsSync(p)) {
      findings.push({
        kind: 'written-outside',
        where: 'extractBundle',
        detail: `${p} exists after the case`,
      });
      await rm(p, { recursive: true, force: true });
    }
  }
  if (v.ok !== x.ok)
    findings.push({
      kind: 'inconsistent',
      where: 'verify/extract',
      detail: `verifyBundle ${out.verify}, extractBundle ${out.extract}`,
    });
  else if (!v.ok && out.verify !== out.extract) out.codeMismatch = `${out.verify}/${out.extract}`;

  // 3. an accepted file that differs from the original must fail digest trust
  if (v.ok && !identicalFile) {
    const d = await bounded((signal) =>
      withBundleFile(file, (s) => verifyBundle(s, { trust: { digest: base.digest }, signal })),
    );
    if (d.ok)
      findings.push({
        kind: 'accepted-altered',
        where: 'verifyBundle(digest trust)',
        detail: 'a file differing from the original passed the expected-digest check',
      });
    else out.digestTrust = judgeRejection(d, 'verifyBundle(digest trust)', findings);
  }

  // 4. random access through the (untrusted) seek index, against the trusted bundle.json: the one
  // just verified, else the original's (the media changed after an earlier verification)
  const manifest = v.ok ? v.value.manifest : base.manifest;
  const r = await bounded(() =>
    withBundleFile(file, async (source) => {
      const reader = await BundleRandomReader.open(source, manifest);
      const paths = ['index.json', ...manifest.blobs.map((b) => blobPath(b.digest))];
      for (const p of paths) {
        const bytes = await reader.readVerified(p);
        const want = resigned && v.ok ? null : original.get(p);
        if (
          want
            ? !bytes.equals(want)
            : p !== 'index.json' &&
              'sha256:' + createHash('sha256').update(bytes).digest('hex') !==
                `sha256:${p.slice(13)}`
        ) {
          findings.push({
            kind: 'accepted-altered',
            where: 'BundleRandomReader.readVerified',
            detail: `${p} served with altered bytes`,
          });
        }
      }
    }),
  );
  out.ms.random = Math.round(r.ms);
  out.random = r.ok ? 'accepted' : judgeRejection(r, 'BundleRandomReader', findings);

  // 5. bundle-agent load, for the sample
  if (agentCases.has(i)) {
    const a = await runAgent(file, dir, made.key.publicPem);
    out.ms.agent = Math.round(a.ms);
    const upgradeDir = path.join(a.root, 'var/lib/upgrade');
    if (a.signal || a.code === null) {
      findings.push({
        kind: a.signal === 'SIGKILL' ? 'hang' : 'crash',
        where: 'bundle-agent load',
        detail: `ended by ${a.signal ?? 'error'} after ${Math.round(a.ms)} ms: ${a.stderr.slice(-300)}`,
      });
      out.agent = 'KILLED';
    } else if (a.code === 0 && a.result?.ready) {
      out.agent = 'accepted';
      if (!v.ok)
        findings.push({
          kind: 'inconsistent',
          where: 'bundle-agent load',
          detail: `the agent loaded a bundle verifyBundle rejects (${out.verify})`,
        });
      const staged = path.join(upgradeDir, `${a.result.version}-${a.result.arch}`);
      const diffs = existsSync(staged)
        ? resigned
          ? await checkResignedLayout(staged, resigned)
          : await diffLayout(staged, original)
        : [`no staged layout at ${staged}`];
      if (diffs.length)
        findings.push({
          kind: 'accepted-altered',
          where: 'bundle-agent load',
          detail: diffs.slice(0, 5).join('; '),
        });
      const others = (await readdir(upgradeDir)).filter((n) => n !== path.basename(staged));
      if (others.length)
        findings.push({
          kind: 'written-outside',
          where: 'bundle-agent load',
          detail: `upgrade dir also holds ${others.join(', ')}`,
        });
    } else {
      const reason = a.result?.error?.reason;
      out.agent = reason ?? `exit ${a.code}`;
      if (!reason)
        findings.push({
          kind: 'crash',
          where: 'bundle-agent load',
          detail: `exit ${a.code} without a JSON result: ${a.stderr.slice(-300)}`,
        });
      else if (reason === 'Internal')
        findings.push({
          kind: 'crash',
          where: 'bundle-agent load',
          detail: `untyped failure (reason Internal): ${a.result.error.message?.slice(0, 300)}`,
        });
      // a load cut short by its source keeps its verified pieces for a resume (docs/ARCHITECTURE.md)
      const resumable = async (n) =>
        ['Truncated', 'MediaRemoved'].includes(reason) &&
        n.endsWith('.partial') &&
        existsSync(path.join(upgradeDir, n, 'resume.json'));
      const left2 = [];
      for (const n of existsSync(upgradeDir) ? await readdir(upgradeDir) : [])
        if (!(await resumable(n))) left2.push(n);
      if (left2.length)
        findings.push({
          kind: 'written-outside',
          where: 'bundle-agent load',
          detail: `a refused load left ${left2.join(', ')} in the upgrade dir`,
        });
    }
    for (const p of escapeProbes(a.root)) {
      if (existsSync(p)) {
        findings.push({
          kind: 'written-outside',
          where: 'bundle-agent load',
          detail: `${p} exists after the load`,
        });
        await rm(p, { recursive: true, force: true });
      }
    }
  }
  await rm(dir, { recursive: true, force: true });
  return out;
}

const from = opt.only !== undefined ? Number(opt.only) : Number(opt.from);
const to = opt.only !== undefined ? Number(opt.only) + 1 : Number(opt.to);
for (let i = from; i < to; i++) {
  emit({ type: 'start', i, agent: agentCases.has(i) });
  const res = await runCase(i);
  // errors that escaped after the case's awaits settled still belong to it
  await new Promise((r) => setImmediate(r));
  current = undefined;
  // the harness's own garbage (mutated files, 16 MiB bundle.json variants) must not count as
  // the reader's memory: collect it before the next case (run.mjs starts us with --expose-gc)
  // (only when buffers piled up: a full collection after every case would double the run time)
  if (process.memoryUsage().arrayBuffers > 48 * 1024 * 1024) globalThis.gc?.();
  if (orphanFindings.length) res.findings.push(...orphanFindings.splice(0));
  emit({ type: 'case', ...res, maxRssKiB: maxRssKiB() });
}
emit({ type: 'done', maxRssKiB: maxRssKiB() });
