#!/usr/bin/env node
// Seeded, reproducible fuzzing of the bundle reader (`pnpm fuzz`; see test/fuzz/README.md).
//
//   node test/fuzz/run.mjs [--count N] [--seed S] [--levels byte,frame,seek,tar,json] [--agent N]
//                          [--only I] [--case-timeout MS] [--rss-limit MIB] [--json] [--no-big-layer]
//
// The cases run in a child process (test/fuzz/worker.mjs) that reports one JSON line per case.
// This process watches it: a case that produces no answer within its bound is a hang (the child
// is killed and restarted after that case), a child that dies is a crash, and the child's peak
// RSS must stay under the bound. Exit status 1 when anything was found, 2 when the harness failed.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WORKER = path.join(HERE, 'worker.mjs');
const ALL_LEVELS = ['byte', 'frame', 'seek', 'tar', 'json'];

const { values: opt } = parseArgs({
  options: {
    count: { type: 'string', default: '1000' },
    seed: { type: 'string', default: '1' },
    levels: { type: 'string', default: ALL_LEVELS.join(',') },
    agent: { type: 'string', default: '10' },
    only: { type: 'string' },
    'case-timeout': { type: 'string', default: '10000' },
    'agent-timeout': { type: 'string', default: '60000' },
    'rss-limit': { type: 'string', default: '300' },
    json: { type: 'boolean', default: false },
    'no-big-layer': { type: 'boolean', default: false },
    quiet: { type: 'boolean', default: false },
  },
});

const count = Number(opt.count);
const levels = opt.levels
  .split(',')
  .map((s) => s.trim())
  .filter(Boolean);
const bad = levels.filter((l) => !ALL_LEVELS.includes(l));
if (bad.length || !levels.length || !Number.isInteger(count) || count < 0) {
  console.error(`fuzz: --levels takes ${ALL_LEVELS.join(',')} and --count a whole number`);
  process.exit(2);
}
const agentN = Math.min(Number(opt.agent), count);
const caseTimeout = Number(opt['case-timeout']);
const agentTimeout = Number(opt['agent-timeout']);
const rssLimitKiB = Number(opt['rss-limit']) * 1024;
const only = opt.only !== undefined ? Number(opt.only) : undefined;

/**
 * The cases that also go through `bundle-agent load`: spread over the run and over the levels
 * (case i has level i mod #levels). With --only, the agent runs for that case when --agent > 0.
 */
function agentCases() {
  if (only !== undefined) return agentN > 0 ? [only] : [];
  const out = new Set();
  for (let j = 0; j < agentN; j++)
    out.add(Math.min(count - 1, Math.floor((j * count) / agentN) + (j % levels.length)));
  return [...out].sort((a, b) => a - b);
}

const sampled = agentCases();
const started = Date.now();
const results = [];
const findings = [];
let peakRssKiB = 0;
let bundleInfo;
let baselineAgentMs;
let restarts = 0;
const log = (s) => {
  if (!opt.json && !opt.quiet) process.stderr.write(s);
};

/** Runs the worker over [from, to); resolves with the index to resume from, or undefined when done. */
function runWorker(from, to) {
  return new Promise((resolve, reject) => {
    const args = [
      WORKER,
      '--seed',
      opt.seed,
      '--levels',
      levels.join(','),
      '--case-timeout',
      String(caseTimeout),
      '--agent-timeout',
      String(agentTimeout),
      '--agent-cases',
      sampled.join(','),
      ...(only !== undefined
        ? ['--only', String(only)]
        : ['--from', String(from), '--to', String(to)]),
      ...(opt['no-big-layer'] ? ['--no-big-layer'] : []),
    ];
    const child = spawn(process.execPath, ['--expose-gc', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let inCase; // { i, agent, since }
    let stderr = '';
    let fatal;
    let killedForHang = false;
    child.stderr.on('data', (d) => {
      stderr = (stderr + d).slice(-4000);
    });
    const watchdog = setInterval(() => {
      if (!inCase) return;
      // the worker bounds each call itself (caseTimeout, then abandons it); this catches a loop
      // that never yields: every call of the case at its bound, plus the agent's, plus slack
      const limit = 5 * caseTimeout + (inCase.agent ? agentTimeout : 0) + 30_000;
      if (Date.now() - inCase.since > limit) {
        killedForHang = true;
        child.kill('SIGKILL');
      }
    }, 1000);
    createInterface({ input: child.stdout }).on('line', (line) => {
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        return;
      }
      if (msg.maxRssKiB) peakRssKiB = Math.max(peakRssKiB, msg.maxRssKiB);
      if (msg.type === 'init') bundleInfo = msg.bundle;
      else if (msg.type === 'baseline') baselineAgentMs = msg.agentMs;
      else if (msg.type === 'fatal') fatal = msg.error;
      else if (msg.type === 'start') inCase = { i: msg.i, agent: msg.agent, since: Date.now() };
      else if (msg.type === 'case') {
        inCase = undefined;
        results.push(msg);
        if (msg.harnessError) {
          fatal = `case ${msg.i}: the harness could not build the mutation: ${msg.harnessError}`;
        }
        for (const f of msg.findings)
          findings.push({ i: msg.i, level: msg.level, desc: msg.desc, ...f });
        if (msg.maxRssKiB > rssLimitKiB && !findings.some((f) => f.kind === 'memory')) {
          findings.push({
            i: msg.i,
            level: msg.level,
            desc: msg.desc,
            kind: 'memory',
            where: 'worker',
            detail: `peak RSS ${Math.round(msg.maxRssKiB / 1024)} MiB after this case, over the ${opt['rss-limit']} MiB bound`,
          });
        }
        const done = results.length;
        if (done % 50 === 0)
          log(
            `fuzz: ${done}/${only !== undefined ? 1 : count} cases, ${findings.length} findings, peak RSS ${Math.round(peakRssKiB / 1024)} MiB\n`,
          );
      }
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearInterval(watchdog);
      if (fatal) return reject(new Error(fatal));
      if (inCase) {
        const r = {
          i: inCase.i,
          level: levels[inCase.i % levels.length],
          desc: '(the worker died in this case; rerun with --only to see the mutation)',
        };
        findings.push({
          ...r,
          kind: killedForHang ? 'hang' : 'crash',
          where: 'worker process',
          detail: killedForHang
            ? 'no answer within the case bound: worker killed'
            : `worker exited (${signal ?? `code ${code}`}): ${stderr.slice(-600)}`,
        });
        results.push({
          ...r,
          type: 'case',
          verify: killedForHang ? 'HANG' : 'CRASH',
          extract: '-',
          random: '-',
          findings: [],
        });
        return resolve(inCase.i + 1 < to && only === undefined ? inCase.i + 1 : undefined);
      }
      if (code !== 0)
        return reject(
          new Error(
            `the fuzz worker exited with ${signal ?? code} outside any case: ${stderr.slice(-1500)}`,
          ),
        );
      resolve(undefined);
    });
  });
}

try {
  let from = 0;
  while (from !== undefined && (only !== undefined || from < count)) {
    const next = await runWorker(from, count);
    if (next !== undefined) restarts++;
    from = next;
  }
} catch (err) {
  console.error(`fuzz: harness failure: ${err.message}`);
  process.exit(2);
}

// ---------------------------------------------------------------------------------------------
// Summary

const tally = (rows, key) => {
  const m = {};
  for (const r of rows) m[r[key]] = (m[r[key]] ?? 0) + 1;
  return Object.fromEntries(Object.entries(m).sort((a, b) => b[1] - a[1]));
};
const perLevel = {};
for (const l of levels) {
  const rows = results.filter((r) => r.level === l);
  perLevel[l] = {
    cases: rows.length,
    acceptedIdentical: rows.filter((r) => r.verify === 'accepted' && !r.resigned).length,
    acceptedResigned: rows.filter((r) => r.verify === 'accepted' && r.resigned).length,
    rejected: tally(
      rows.filter((r) => r.verify !== 'accepted'),
      'verify',
    ),
  };
}
const agentRows = results.filter((r) => r.agent !== undefined);
const summary = {
  seed: opt.seed,
  count: only !== undefined ? 1 : count,
  only,
  levels,
  bundle: bundleInfo,
  durationSeconds: Math.round((Date.now() - started) / 100) / 10,
  peakRssMiB: Math.round(peakRssKiB / 1024),
  rssLimitMiB: Number(opt['rss-limit']),
  workerRestarts: restarts,
  cases: results.length,
  acceptedIdentical: results.filter((r) => r.verify === 'accepted' && !r.resigned).length,
  acceptedResigned: results.filter((r) => r.verify === 'accepted' && r.resigned).length,
  rejectedByCode: tally(
    results.filter((r) => r.verify !== 'accepted'),
    'verify',
  ),
  extractByCode: tally(results, 'extract'),
  randomReaderByOutcome: tally(results, 'random'),
  verifyExtractCodeMismatches: results.filter((r) => r.codeMismatch).length,
  perLevel,
  agent: {
    cases: agentRows.length,
    baselineMs: baselineAgentMs,
    byOutcome: tally(agentRows, 'agent'),
    indices: sampled,
  },
  findings,
  // the cases where the worker's peak RSS grew most (what drives memory)
  rssGrowth: results
    .map((r, k) => ({
      i: r.i,
      desc: r.desc,
      growthKiB: (r.maxRssKiB ?? 0) - (k > 0 ? (results[k - 1].maxRssKiB ?? 0) : 0),
    }))
    .filter((r) => r.growthKiB > 0)
    .sort((a, b) => b.growthKiB - a.growthKiB)
    .slice(0, 5)
    .map((r) => ({ i: r.i, desc: r.desc, growthMiB: Math.round(r.growthKiB / 102.4) / 10 })),
  ...(opt.json
    ? {
        results: results.map(
          ({
            i,
            level,
            desc,
            resigned,
            verify,
            extract,
            random,
            agent,
            digestTrust,
            codeMismatch,
            ms,
          }) => ({
            i,
            level,
            desc,
            resigned,
            verify,
            extract,
            random,
            agent,
            digestTrust,
            codeMismatch,
            ms,
          }),
        ),
      }
    : {}),
};

if (opt.json) {
  process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
} else {
  const p = (s = '') => process.stdout.write(s + '\n');
  p(
    `fuzz: seed ${summary.seed}, ${summary.cases} cases${only !== undefined ? ` (only #${only})` : ''}, levels ${levels.join(',')}, ${summary.durationSeconds} s, peak RSS ${summary.peakRssMiB} MiB (bound ${summary.rssLimitMiB} MiB)`,
  );
  if (bundleInfo)
    p(
      `base bundle: ${bundleInfo.size} bytes, ${bundleInfo.frames} frames, ${bundleInfo.entries} entries, ${bundleInfo.digest}`,
    );
  p();
  p('level   cases  accepted-identical  accepted-resigned  rejected by code');
  for (const [l, s] of Object.entries(perLevel)) {
    p(
      `${l.padEnd(7)} ${String(s.cases).padStart(5)}  ${String(s.acceptedIdentical).padStart(18)}  ${String(s.acceptedResigned).padStart(17)}  ${Object.entries(
        s.rejected,
      )
        .map(([c, n]) => `${c} ${n}`)
        .join(', ')}`,
    );
  }
  p();
  p(
    `verifyBundle rejections: ${
      Object.entries(summary.rejectedByCode)
        .map(([c, n]) => `${c} ${n}`)
        .join(', ') || 'none'
    }`,
  );
  p(
    `extractBundle: ${Object.entries(summary.extractByCode)
      .map(([c, n]) => `${c} ${n}`)
      .join(', ')}`,
  );
  p(
    `BundleRandomReader: ${Object.entries(summary.randomReaderByOutcome)
      .map(([c, n]) => `${c} ${n}`)
      .join(', ')}`,
  );
  p(
    `bundle-agent load: ${agentRows.length} cases${
      agentRows.length
        ? `: ${Object.entries(summary.agent.byOutcome)
            .map(([c, n]) => `${c} ${n}`)
            .join(', ')}`
        : ''
    }`,
  );
  p(
    `largest peak-RSS growth: ${summary.rssGrowth.map((r) => `#${r.i} +${r.growthMiB} MiB`).join(', ') || 'none'}`,
  );
  p();
  if (findings.length === 0) p('findings: none');
  else {
    p(`findings: ${findings.length}`);
    for (const f of findings) {
      p(`  #${f.i} [${f.level}] ${f.kind} in ${f.where}: ${f.detail}`);
      p(`      mutation: ${f.desc}`);
      p(
        `      reproduce: pnpm fuzz --seed ${opt.seed} --levels ${levels.join(',')} --only ${f.i}${opt['no-big-layer'] ? ' --no-big-layer' : ''}`,
      );
    }
  }
}
process.exitCode = findings.length ? 1 : 0;
