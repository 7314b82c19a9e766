// tier: unit
// Each watch of the approvals runs a length of its own (approval-watch.ts watchLengthMs), as
// client-go's informers draw theirs: nodes started together (a cluster's reboot) do not all
// re-list in the same second after it. The longest watch, with no bookmark in it, plus the list
// after it, stays under the peers' grace: a healthy quiet watch never closes the port.
import t from 'tap';
import { APPROVALS_GRACE_MS, DIRECTORY_REQUEST_MS } from '@offline-bundle/agent';
import {
  APPROVALS_RELIST_MS,
  WATCH_LENGTH_SPREAD,
  watchLengthMs,
} from '../../agent/dist/daemon/approval-watch.js';

t.test(
  'a watch runs APPROVALS_RELIST_MS to (1 + WATCH_LENGTH_SPREAD) times it, spread over that range',
  async (t) => {
    t.equal(watchLengthMs(APPROVALS_RELIST_MS, 0), APPROVALS_RELIST_MS, 'the shortest');
    t.equal(
      watchLengthMs(APPROVALS_RELIST_MS, 1),
      APPROVALS_RELIST_MS * (1 + WATCH_LENGTH_SPREAD),
      'the longest',
    );
    t.equal(
      watchLengthMs(APPROVALS_RELIST_MS, 7),
      APPROVALS_RELIST_MS * (1 + WATCH_LENGTH_SPREAD),
      'a random number out of range is held to it',
    );
    const drawn = Array.from({ length: 500 }, () => watchLengthMs(APPROVALS_RELIST_MS));
    t.ok(
      drawn.every(
        (ms) => ms >= APPROVALS_RELIST_MS && ms <= APPROVALS_RELIST_MS * (1 + WATCH_LENGTH_SPREAD),
      ),
      'every drawn length in range',
    );
    // 500 nodes: how many re-list within the same second after a common start
    const perSecond = new Map<number, number>();
    for (const ms of drawn)
      perSecond.set(Math.floor(ms / 1000), (perSecond.get(Math.floor(ms / 1000)) ?? 0) + 1);
    const most = Math.max(...perSecond.values());
    t.comment(
      `500 watches begun together end over ${perSecond.size} distinct seconds, at most ${most} in one`,
    );
    t.ok(perSecond.size >= 25, "spread over most of the range's 30 s");
    t.ok(most < 60, 'no second with a crowd (a fixed length: all 500 in one)');
  },
);

t.test(
  'the longest watch without a bookmark, and the list after it, end within the grace',
  async (t) => {
    const longest = APPROVALS_RELIST_MS * (1 + WATCH_LENGTH_SPREAD) + DIRECTORY_REQUEST_MS;
    t.comment(
      `longest silence of a healthy watch: ${longest / 1000} s, grace ${APPROVALS_GRACE_MS / 1000} s`,
    );
    t.ok(longest < APPROVALS_GRACE_MS, 'a quiet cluster keeps the port open');
  },
);
