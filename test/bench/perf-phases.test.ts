// tier: unit
// Where the peers profile (bench/peers-profile.mjs) puts a perf sample: the phase the first
// frame that names one says, leaf first, so sha256 is sha256 wherever it was called from and a
// copy under a file write is the write; what names none goes by its leaf's library.
import t from 'tap';
import {
  ownFunctions,
  parsePerfScript,
  phaseOf,
  phaseTable,
} from '../../bench/lib/perf-phases.mjs';

const stack = (...syms: string[]) =>
  syms.map((sym) => ({ sym, dso: sym.startsWith('JS:') ? '[JIT] tid 7' : '/usr/bin/node' }));

t.test('a sample goes to the first phase its stack names, leaf first', async (t) => {
  t.equal(
    phaseOf(
      stack(
        'sha256_block_data_order_shaext',
        'node::crypto::Hash::HashUpdate',
        'JS:*transform file:///w/packages/format/dist/entry-files.js:120:24',
      ),
    ),
    'sha256',
  );
  t.equal(
    phaseOf(
      stack(
        'crypto/sha256.block.abi0',
        'github.com/containerd/containerd/content/local.(*writer).Write',
      ),
    ),
    'sha256',
    "Go's sha256 too",
  );
  t.equal(
    phaseOf(stack('_aesni_ctr32_ghash_6x', 'SSL_read', 'node::crypto::TLSWrap::ClearOut')),
    'TLS cipher (AES-GCM)',
    'the cipher under SSL_read is the cipher',
  );
  t.equal(
    phaseOf(stack('ssl3_read_bytes', 'SSL_read', 'node::crypto::TLSWrap::ClearOut')),
    'TLS records (OpenSSL, TLSWrap)',
    'OpenSSL besides the cipher',
  );
  t.equal(
    phaseOf([
      { sym: 'copy_folio_from_iter_atomic', dso: '[kernel.kallsyms]' },
      { sym: 'generic_perform_write', dso: '[kernel.kallsyms]' },
      { sym: 'ext4_buffered_write_iter', dso: '[kernel.kallsyms]' },
    ]),
    'kernel: file writes, syncs',
    'a copy under a file write is the write',
  );
  t.equal(
    phaseOf(
      stack(
        'v8::internal::ConcurrentMarking::RunMajor',
        'node::(anonymous namespace)::PlatformWorkerThread',
      ),
    ),
    'V8 GC',
  );
  t.equal(
    phaseOf(
      stack(
        'v8::internal::Scanner::Next',
        'v8::internal::(anonymous namespace)::CompileToplevel',
        'JS:^Module._compile node:internal/modules/cjs/loader:1483:37',
      ),
    ),
    'startup: module load and compile',
  );
  t.equal(
    phaseOf(stack('Builtins_LoadIC', 'JS:*socketOnData node:_http_client:537:22')),
    'JavaScript and V8 runtime',
    'plain JavaScript: by its leaf',
  );
  t.equal(phaseOf([{ sym: 'do_syscall_64', dso: '[kernel.kallsyms]' }]), 'kernel: other');
  t.equal(
    phaseOf([{ sym: '_int_malloc', dso: '/usr/lib/x86_64-linux-gnu/libc.so.6' }]),
    'other (libc.so.6)',
  );
  t.equal(phaseOf([]), 'unknown');
});

const SCRIPT = `node  6347 1234.500000: 
\t          f2fd21 sha256_block_data_order_shaext (/usr/bin/node)
\t          8ccbd4 node::crypto::Hash::HashUpdate (/usr/bin/node)

containerd  5178 
\t          4a1b2c crypto/sha256.block.abi0 (/usr/bin/containerd)

node  6347 
\t          7bac1b JS:*transform file:///work/main/packages/format/dist/entry-files.js:120:24 (/tmp/perf-6347.map)
\t          7bac1c JS:^append file:///work/main/packages/format/dist/entry-files.js:116:17 (/tmp/perf-6347.map)
\t          7bac1d JS:*transform file:///work/main/packages/format/dist/entry-files.js:120:24 (/tmp/perf-6347.map)
`;

t.test(
  "perf script text: a sample a block; seconds by process and phase; the project's own functions counted once a sample",
  async (t) => {
    const samples = parsePerfScript(SCRIPT);
    t.equal(samples.length, 3);
    t.equal(
      samples[0].t,
      1234.5,
      "a sample's time, when perf script printed it (the fetch and the load are told apart by it)",
    );
    t.same(samples[1], {
      comm: 'containerd',
      t: Number.NaN,
      frames: [{ sym: 'crypto/sha256.block.abi0', dso: '/usr/bin/containerd' }],
    });
    const table = phaseTable(samples, 2);
    t.same(
      table.map((r: { proc: string; phase: string; s: number }) => [r.proc, r.phase, r.s]),
      [
        ['node', 'sha256', 0.5],
        ['containerd', 'sha256', 0.5],
        ['node', 'JavaScript and V8 runtime', 0.5],
      ],
    );
    t.same(
      ownFunctions(samples, 2),
      [
        ['transform packages/format/dist/entry-files.js:120:24', 0.5],
        ['append packages/format/dist/entry-files.js:116:17', 0.5],
      ],
      'a recursive frame counts once',
    );
  },
);
