// The README's first command runs `pnpm demo` (scripts/demo.mjs): the whole product on one
// machine. Run it here so that command cannot break unnoticed (it did once: a CLI's exit code
// changed under it).
import t from 'tap';
import { spawn } from 'node:child_process';
import path from 'node:path';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');

t.test('pnpm demo: a bundle from generated images, loaded through the agent into containerd, every image pinned', { skip: process.getuid?.() !== 0 && 'needs root (loop mount, containerd)' }, async (t) => {
  const child = spawn(process.execPath, [path.join(ROOT, 'scripts/demo.mjs')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const code = await new Promise((r) => child.on('close', r));
  t.equal(code, 0, `exit 0: ${out.slice(-2000)}`);
  t.match(out, /Done: update 4\.14\.39 is loaded on this node\. You may remove the USB stick\./, 'the technician\'s last line');
  const pinned = out.split('\n').filter((l) => /io\.cri-containerd\.pinned=pinned/.test(l));
  t.equal(pinned.length, 5, 'containerd holds the five images, pinned');
  t.match(out, /== demo complete/);
});
