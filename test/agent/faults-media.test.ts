// Case 5 of the fault tests (faults.test.ts has 1-4 and the description, faults-sigterm.test.ts 6,
// faults-cluster.test.ts 7; faults-setup.ts the set-up).
import t from 'tap';
import { truncate, unlink } from 'node:fs/promises';
import {
  STAGED,
  MANIFEST,
  node,
  mediaNode,
  load,
  frozenMidRead,
  cond,
  expectReady,
  expectFailed,
  type Node,
} from './faults-setup.js';

async function bundleFault(
  t: any,
  n: Node,
  fault: () => Promise<void>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const a = await frozenMidRead(t, n);
  try {
    await fault();
  } finally {
    a.child.kill('SIGCONT');
  }
  return a.exit;
}

t.test('5. the bundle truncated or deleted while it is read', async (t) => {
  const shrink = (n: Node) => () => truncate(n.file, Math.floor(MANIFEST.totals.layoutBytes / 2));
  const remove = (n: Node) => () => unlink(n.file);

  t.test('staged mode', async (t) => {
    const n = await node(t);
    // the verified pieces stay for a resume; the next load of the same bundle leaves nothing
    const kept = [`${STAGED}.partial`];
    let r = await bundleFault(t, n, shrink(n));
    await expectFailed(t, n, r, 'Truncated', 'truncated while staged', kept);
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');

    r = await bundleFault(t, n, remove(n));
    const gone = await expectFailed(t, n, r, 'MediaRemoved', 'deleted while staged', kept);
    t.match(
      cond(gone, 'Failed')?.message,
      /disappeared .*Plug it in again/,
      'the message says the media went away',
    );
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');
  });

  t.test('media mode (too little disk to stage)', async (t) => {
    const n = await mediaNode(t);
    let r = await bundleFault(t, n, shrink(n));
    await expectFailed(t, n, r, 'Truncated', 'truncated while verified from the media');
    await n.restore();
    r = await load(n);
    await expectReady(t, n, r, 'the restored file');
    t.match(r.stdout, /"mode":"media"/, 'served from the media');

    r = await bundleFault(t, n, remove(n));
    await expectFailed(t, n, r, 'MediaRemoved', 'deleted while verified from the media');
    await n.restore();
    await expectReady(t, n, await load(n), 'the restored file');
  });
});
