#!/usr/bin/env node
// Where the first receiving node's CPU goes in the peers bench (issue #42 item 4): runs
// bench/peers.mjs with node-1's processes watched from outside, so the bench itself is unchanged.
// Views of the same run, each over "ours" (from the approval to the end; the baseline ran before
// it): CPU-seconds per process and thread (/proc tasks, polled); by phase, from perf record on
// node-1's agent and containerd (bench/lib/perf-phases.mjs: TLS cipher, sha256, GC, copies,
// unpack, the kernel), whole and split at the transfer's end (the fetch, then the load); the
// agent's garbage collections (bench/lib/gc-watch.mjs, preloaded through NODE_OPTIONS); and,
// with --js-symbols, the agent's own functions (node's --perf-basic-prof: --cpu-prof is not
// allowed in NODE_OPTIONS).
//
//   node bench/peers-profile.mjs [--nodes 1] [--size 256M] [--out DIR] [--js-symbols] [--top 40]
//
// Needs root and perf (linux-perf). Writes DIR/profile.json (every table), DIR/perf.data.
import { execFileSync, spawn } from 'node:child_process';
import {
  readFileSync,
  readdirSync,
  readlinkSync,
  mkdirSync,
  writeFileSync,
  renameSync,
} from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { statSeconds } from './lib/netns-meter.mjs';
import { ownFunctions, perfSamples, phaseTable } from './lib/perf-phases.mjs';
import { parseSize } from './peers.mjs';

const HERE = new URL('.', import.meta.url).pathname;
/** How often node-1's processes and threads are read (a thread that ends loses at most this much). */
const POLL_MS = 500;
/** perf's sampling rate: a prime, off the kernel's timer, a few hundred samples a second per busy thread. */
const PERF_HZ = 499;
/** The receiving node's agent: its --config lies in the node's temp root (test/agent/peers-nodes-setup.ts). */
const RECEIVER_MARK = 'ob-peers-node-1-';

const read = (f) => {
  try {
    return readFileSync(f, 'utf8');
  } catch {
    return undefined;
  }
};
const cmdline = (pid) => (read(`/proc/${pid}/cmdline`) ?? '').split('\0');
const pids = () =>
  readdirSync('/proc')
    .filter((n) => /^\d+$/.test(n))
    .map(Number);
const netOf = (pid) => {
  try {
    return readlinkSync(`/proc/${pid}/ns/net`);
  } catch {
    return undefined;
  }
};

/** The receiving agent's PID, once it runs. */
function receiverAgent() {
  return pids().find((p) => {
    const a = cmdline(p);
    return a.some((x) => x.endsWith('bundle-agent.js')) && a.some((x) => x.includes(RECEIVER_MARK));
  });
}

/** A /proc stat line's own CPU-seconds (utime + stime), without the children's. */
function ownSeconds(stat) {
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** CPU-seconds of every thread of every process in network namespace `net` (and of the children each waited for), keyed pid/tid. */
function threadsIn(net) {
  const out = new Map();
  for (const pid of pids()) {
    if (netOf(pid) !== net) continue;
    const proc = (read(`/proc/${pid}/comm`) ?? '?').trim();
    let tids;
    try {
      tids = readdirSync(`/proc/${pid}/task`);
    } catch {
      continue;
    }
    for (const tid of tids) {
      const stat = read(`/proc/${pid}/task/${tid}/stat`);
      if (stat)
        out.set(`${pid}/${tid}`, {
          proc,
          comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')),
          s: ownSeconds(stat),
        });
    }
    const whole = read(`/proc/${pid}/stat`);
    if (whole)
      out.set(`${pid}/children`, {
        proc,
        comm: '(children waited for)',
        s: statSeconds(whole) - ownSeconds(whole),
      });
  }
  return out;
}

/** Watches node-1's processes: thread times from `begin()` (the approval) to the end, perf over the same span. */
function watchReceiver(out, hz) {
  const w = {
    first: new Map(),
    last: new Map(),
    perf: undefined,
    agent: undefined,
    net: undefined,
  };
  const timer = setInterval(() => {
    w.agent ??= receiverAgent();
    if (w.agent) w.net ??= netOf(w.agent);
    if (w.perf) for (const [k, v] of threadsIn(w.net)) w.last.set(k, v);
  }, POLL_MS);
  w.begin = () => {
    w.gcBefore = readGc(out, w.agent);
    if (!w.net)
      throw new Error(
        `the approval came before node-1's agent was seen (no process with ${RECEIVER_MARK} in its command line)`,
      );
    const now = threadsIn(w.net);
    for (const [k, v] of now) w.first.set(k, v.s);
    const targets = [...new Set([...now.keys()].map((k) => k.split('/')[0]))];
    w.perf = spawn(
      'perf',
      ['record', '-F', String(hz), '-g', '-o', join(out, 'perf.data'), '-p', targets.join(',')],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    process.stderr.write(
      `peers-profile: node-1's agent is PID ${w.agent}; perf on ${targets.join(', ')} from the approval\n`,
    );
  };
  w.stop = () => clearInterval(timer);
  return w;
}

/** The agent's garbage collections and heap so far (bench/lib/gc-watch.mjs), if it wrote them. */
function readGc(out, pid) {
  const text = pid && read(join(out, `gc-${pid}.json`));
  return text ? JSON.parse(text) : undefined;
}

/** CPU-seconds per process and thread name since the agent started, largest first. */
function threadTable(w) {
  const sums = new Map();
  for (const [k, v] of w.last) {
    const [pid, tid] = k.split('/');
    const key = `${v.proc} ${pid} ${tid === pid ? 'main thread' : tid === 'children' ? v.comm : `thread "${v.comm.replace(/\d+$/, '#')}"`}`;
    sums.set(key, (sums.get(key) ?? 0) + v.s - (w.first.get(k) ?? 0));
  }
  return [...sums].filter(([, s]) => s > 0).sort((a, b) => b[1] - a[1]);
}

/** bench/peers.mjs with the rows as JSON; `onApproval` once it says it approves (its stderr passed on). */
function runBench(values, onApproval) {
  const env = { ...process.env };
  // every node process of the run writes /tmp/perf-PID.map (perf reads the agent's), interpreted frames named too
  const opts = [
    `--import=${join(HERE, 'lib/gc-watch.mjs')}`,
    ...(values['js-symbols'] ? ['--perf-basic-prof', '--interpreted-frames-native-stack'] : []),
  ];
  env.NODE_OPTIONS = `${env.NODE_OPTIONS ?? ''} ${opts.join(' ')}`.trim();
  Object.assign(env, { OB_GC_WATCH_MARK: RECEIVER_MARK, OB_GC_WATCH_DIR: values.out });
  const child = spawn(
    process.execPath,
    [join(HERE, 'peers.mjs'), '--json', '--nodes', values.nodes, '--size', values.size],
    { stdio: ['ignore', 'pipe', 'pipe'], env },
  );
  let stdout = '';
  child.stdout.on('data', (d) => {
    stdout += d;
  });
  child.stderr.on('data', (d) => {
    process.stderr.write(d);
    if (/approving/.test(String(d))) onApproval();
  });
  return new Promise((resolve, reject) =>
    child.on('exit', (code) =>
      code === 0
        ? resolve(JSON.parse(stdout))
        : reject(new Error(`bench/peers.mjs exited ${code}`)),
    ),
  );
}

/** The tables: per thread, per phase (perf), the project's own functions. */
function printReport(values, rows, w, gibs) {
  const hz = Number(values.hz);
  const samples = perfSamples(join(values.out, 'perf.data'));
  const phases = phaseTable(samples, hz);
  const threads = threadTable(w);
  const own = ownFunctions(
    samples.filter((x) => x.comm === 'node'),
    hz,
  );
  const tmp = join(values.out, 'profile.json.tmp');
  writeFileSync(tmp, JSON.stringify({ rows, agent: w.agent, gibs, threads, phases, own }, null, 1));
  renameSync(tmp, join(values.out, 'profile.json'));
  const gib = rows.find((r) => r.id === 'peers-cpu');
  console.log(
    `peers-cpu row: ours ${gib.ours.median.toFixed(2)} CPU-s/GiB, baseline ${gib.peer.median.toFixed(2)}, ratio ${gib.ratios.median.toFixed(2)}`,
  );
  console.log(
    `\nCPU-s per GiB since the approval, by process and thread (/proc; ${gibs.toFixed(3)} GiB):`,
  );
  for (const [k, s] of threads.slice(0, 20))
    console.log(`${(s / gibs).toFixed(2).padStart(8)}  ${k}`);
  console.log(`\nCPU-s per GiB by phase (perf at ${hz} Hz, ${samples.length} samples):`);
  for (const p of phases.filter((x) => x.s / gibs >= 0.05))
    console.log(`${(p.s / gibs).toFixed(2).padStart(8)}  ${p.proc.padEnd(12)} ${p.phase}`);
  // perf began at the approval: samples before the transfer's end are the fetch, the rest the load
  const transfer = rows.find((r) => r.id === 'peers-transfer')?.ours.median ?? Infinity;
  const t0 = Math.min(...samples.map((x) => x.t));
  for (const [name, part] of [
    ['the fetch', samples.filter((x) => x.t - t0 < transfer)],
    ['the load', samples.filter((x) => x.t - t0 >= transfer)],
  ]) {
    console.log(
      `\n${name} (${name === 'the fetch' ? `the first ${transfer.toFixed(1)} s` : 'after it'}), CPU-s per GiB by phase:`,
    );
    for (const p of phaseTable(part, hz).filter((x) => x.s / gibs >= 0.1))
      console.log(`${(p.s / gibs).toFixed(2).padStart(8)}  ${p.proc.padEnd(12)} ${p.phase}`);
  }
  const gc0 = w.gcBefore;
  const gc1 = readGc(values.out, w.agent);
  if (gc1) {
    console.log(
      `\nthe agent's heap at the end: ${(gc1.heapUsed / 2 ** 20).toFixed(0)} MiB used of ${(gc1.heapTotal / 2 ** 20).toFixed(0)}, rss ${(gc1.rss / 2 ** 20).toFixed(0)} MiB; its collections since the approval, per GiB:`,
    );
    for (const [k, v] of Object.entries(gc1.gc))
      console.log(
        `${k.padStart(12)}: ${((v.n - (gc0?.gc[k]?.n ?? 0)) / gibs).toFixed(0)} collections, ${((v.ms - (gc0?.gc[k]?.ms ?? 0)) / 1000 / gibs).toFixed(2)} s (main-thread pause)`,
      );
  }
  console.log("\nthe agent's own functions, inclusive CPU-s per GiB:");
  for (const [k, s] of own.slice(0, Number(values.top)))
    console.log(`${(s / gibs).toFixed(2).padStart(8)}  ${k}`);
}

async function main() {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '1' },
      size: { type: 'string', default: '256M' },
      out: { type: 'string', default: `/tmp/peers-profile-${Date.now()}` },
      'js-symbols': { type: 'boolean', default: false },
      top: { type: 'string', default: '40' },
      hz: { type: 'string', default: String(PERF_HZ) },
    },
  });
  if (process.getuid?.() !== 0)
    throw new Error('bench/peers-profile.mjs runs perf on other processes: run it as root');
  try {
    execFileSync('perf', ['--version'], { stdio: 'ignore' });
  } catch {
    throw new Error('perf is not installed: apt-get install linux-perf');
  }
  mkdirSync(values.out, { recursive: true });
  const w = watchReceiver(values.out, Number(values.hz));
  let rows;
  try {
    rows = await runBench(values, () => w.begin());
  } finally {
    w.stop();
    if (w.perf && w.perf.exitCode === null) {
      w.perf.kill('SIGINT');
      await new Promise((r) => w.perf.once('exit', r));
    }
  }
  printReport(values, rows, w, parseSize(values.size) / 2 ** 30);
}

try {
  await main();
} catch (err) {
  console.error(`bench/peers-profile.mjs: ${err instanceof Error ? err.message : err}`);
  process.exit(1);
}
