// perf samples of a node's processes sorted into the phases issue #42 item 4 asks about (TLS,
// sha256, copies, unpack, files, network, GC, JavaScript...): each sample goes to the first
// phase any frame of its stack names, leaf first, so a memcpy under a file write counts as the
// write and sha256 counts as sha256 wherever it was called from.
import { execFileSync } from 'node:child_process';

/** Phases by the frames that mark them, tried in this order on every frame, leaf to root. */
export const PHASES = [
  ['sha256', /sha256/i],
  ['TLS cipher (AES-GCM)', /aesni|_gcm|ghash|chacha|poly1305|\baes_/i],
  ['gzip decode', /compress\/flate|compress\/gzip|inflate/i],
  ['zstd', /zstd/i],
  [
    'tar unpack (containerd)',
    /archive\/tar|applyNaive|archive\.apply|archive\.Apply|\/diff\/apply/,
  ],
  [
    'startup: module load and compile',
    /Module\._load|CompileToplevel|ModuleWrap::(Link|Instantiate|Evaluate)|importModuleDynamically/,
  ],
  [
    'kernel: file writes, syncs',
    /\b(ext4_|vfs_write|vfs_fsync|generic_perform_write|do_fsync|iomap_)/,
  ],
  ['kernel: file reads', /\b(vfs_read|filemap_read|splice_|do_sendfile)/],
  [
    'kernel: TCP',
    /\b(tcp_|sock_|__sys_(recv|send)|inet_|__netif|net_rx|veth_|ip_(rcv|output|finish))/,
  ],
  [
    'kernel: sleeps and wakeups',
    /\b(finish_task_switch|schedule|futex_|ep_poll|do_epoll|try_to_wake_up|__wake_up)/,
  ],
  ['TLS records (OpenSSL, TLSWrap)', /\b(SSL_|ssl3_|tls1?_|TLSWrap)/],
  ['HTTP parse (llhttp)', /llhttp|Parser::Execute/],
  ['V8 GC', /Heap::|Scaveng|MarkCompact|Marking|Sweeper|GCTracer|MinorMC/],
  ['status and cluster reports', /JS:.*(status-file|tracker|report|kube)/i],
  ['memcpy', /memmove|memcpy/],
];

/** The phase of one sample, from its frames leaf first; what names none goes by the leaf's library. */
export function phaseOf(frames) {
  for (const f of frames) for (const [name, re] of PHASES) if (re.test(f.sym)) return name;
  const leaf = frames[0];
  if (!leaf) return 'unknown';
  if (leaf.dso.includes('kernel')) return 'kernel: other';
  if (/JIT|perf-\d+\.map|Builtins_|v8::|^JS:/.test(`${leaf.dso} ${leaf.sym}`))
    return 'JavaScript and V8 runtime';
  return `other (${leaf.dso.split('/').pop()})`;
}

/** Samples of `perf.data` as { comm, frames: [{ sym, dso }] }, leaf first. */
export function perfSamples(data) {
  return parsePerfScript(
    execFileSync('perf', ['script', '-i', data, '-F', 'comm,tid,time,ip,sym,dso'], {
      encoding: 'utf8',
      maxBuffer: 2 ** 30,
      stdio: ['ignore', 'pipe', 'ignore'],
    }),
  );
}

/** `perf script -F comm,tid[,time],ip,sym,dso` text: one block a sample, its first line "comm tid [seconds:]", then a frame a line. */
export function parsePerfScript(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    const lines = block.split('\n').filter(Boolean);
    if (!lines.length) continue;
    const frames = lines.slice(1).map((l) => {
      const m = /^\s*[0-9a-f]+\s+(.*)\s+\((.*)\)\s*$/.exec(l);
      return m ? { sym: m[1], dso: m[2] } : { sym: l.trim(), dso: '' };
    });
    const [comm, , time] = lines[0].trim().split(/\s+/);
    out.push({ comm, t: Number.parseFloat(time ?? ''), frames });
  }
  return out;
}

/** CPU-seconds by process name and phase (samples / hz), largest first. */
export function phaseTable(samples, hz) {
  const sums = new Map();
  for (const s of samples) {
    const key = `${s.comm}\t${phaseOf(s.frames)}`;
    sums.set(key, (sums.get(key) ?? 0) + 1 / hz);
  }
  return [...sums]
    .map(([k, s]) => ({ proc: k.split('\t')[0], phase: k.split('\t')[1], s }))
    .sort((a, b) => b.s - a.s);
}

/** Inclusive CPU-seconds of the project's own JavaScript functions (their frames name a dist/ file). */
export function ownFunctions(samples, hz) {
  const sums = new Map();
  for (const s of samples) {
    const seen = new Set(
      s.frames
        .filter((f) => /JS:.*\/(agent|packages)\/.*dist\//.test(f.sym))
        .map((f) =>
          f.sym.replace(/^JS:[*~^]?/, '').replace(/file:\/\/\S*\/(agent|packages)\//, '$1/'),
        ),
    );
    for (const k of seen) sums.set(k, (sums.get(k) ?? 0) + 1 / hz);
  }
  return [...sums].sort((a, b) => b[1] - a[1]);
}
