// Case 6 of the fault tests (faults.test.ts has 1-4 and the description, faults-media.test.ts 5,
// faults-cluster.test.ts 7; faults-setup.ts the set-up).
import t from 'tap';
import { rm, writeFile } from 'node:fs/promises';
import {
  STAGED,
  REFS,
  node,
  mediaNode,
  startLoad,
  load,
  waitStatus,
  phase,
  frozenMidRead,
  pullsDone,
  expectReady,
  expectFailed,
  type Status,
  type Node,
  type Agent,
} from './faults-setup.js';

t.test(
  '6. SIGTERM at each phase: Failed, Interrupted, nothing left; the next load is Ready',
  async (t) => {
    const interrupt = async (
      t: any,
      n: Node,
      at: ((s: Status) => boolean) | 'reading',
      atWhat: string,
      hold?: 'reload',
    ) => {
      let a: Agent;
      if (at === 'reading') {
        // the read pass: staging in staged mode, the full verification in media mode
        a = await frozenMidRead(t, n);
        a.child.kill('SIGTERM');
        a.child.kill('SIGCONT');
      } else if (hold) {
        a = startLoad(n);
        // hold the agent inside its second reload (after the pulls, with the pins): the Pinning phase
        await waitStatus(n, a, 'phase Preloading', phase('Preloading'));
        await writeFile(n.gate, '');
        await waitStatus(n, a, atWhat, at);
        a.child.kill('SIGTERM');
        await rm(n.gate);
      } else {
        const before = await pullsDone(n);
        a = startLoad(n);
        await waitStatus(n, a, atWhat, at);
        a.child.kill('SIGSTOP');
        t.ok((await pullsDone(n)) - before < REFS, 'frozen while pulls are still to come');
        a.child.kill('SIGTERM');
        a.child.kill('SIGCONT');
      }
      // a stop in Staging keeps the verified pieces for a resume, and so does one after (the whole layout put back as a marked partial); the next load leaves nothing
      await expectFailed(
        t,
        n,
        await a.exit,
        'Interrupted',
        `SIGTERM at ${atWhat}`,
        atWhat === 'Verifying' ? [] : [`${STAGED}.partial`],
      );
      await expectReady(t, n, await load(n), 'the next load');
    };
    t.test('Verifying (the full verification pass, media mode)', async (t) =>
      interrupt(t, await mediaNode(t), 'reading', 'Verifying'),
    );
    const n = await node(t);
    t.test('Staging', async (t) => interrupt(t, n, 'reading', 'Staging'));
    t.test('Preloading (serving)', async (t) => interrupt(t, n, phase('Preloading'), 'Preloading'));
    t.test('Pinning', async (t) => interrupt(t, n, phase('Pinning'), 'Pinning', 'reload'));
  },
);
