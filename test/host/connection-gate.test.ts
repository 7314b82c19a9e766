// tier: unit
// The connection gate the peer port and the metrics listener share (packages/host
// connection-gate.ts), driven with stand-in sockets (an address, a count of bytes read, destroy):
// a silent socket never pushes out one that spoke, an address keeps to its share, the fullest
// address gives way to a newcomer, and the first-bytes wait is bounded. The real servers'
// floods are test/agent/peers-unauthenticated.test.ts and test/status/metrics-listener.test.ts.
import t from 'tap';
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ConnectionGate,
  addressKey,
  type GateLimits,
  type GatedSocket,
} from '@offline-bundle/host';
import { PEER_LIMITS } from '@offline-bundle/agent';
import { METRICS_CONNECTION_LIMITS } from '@offline-bundle/status';

const WAIT_MS = 5;
const LIMITS: GateLimits = { max: 4, perAddress: 2, firstBytesWaitMs: WAIT_MS };

/** A stand-in socket: destroying it emits 'close' on the next tick, as a net.Socket does. */
class StandInSocket extends EventEmitter implements GatedSocket {
  bytesRead = 0;
  destroyed = false;
  constructor(readonly remoteAddress: string) {
    super();
  }

  speak(): this {
    this.bytesRead++;
    return this;
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    process.nextTick(() => this.emit('close'));
  }
}

/** Admits each socket, then lets their first-bytes wait run out. */
async function admitAll(gate: ConnectionGate, sockets: StandInSocket[]): Promise<StandInSocket[]> {
  for (const s of sockets) gate.admit(s);
  await sleep(WAIT_MS * 4);
  return sockets;
}

const from = (address: string, n: number) =>
  Array.from({ length: n }, () => new StandInSocket(address));
const alive = (sockets: StandInSocket[]) => sockets.filter((s) => !s.destroyed).length;

t.test(
  "an address's share: a silent newcomer is refused, one that spoke takes a silent socket's place",
  async (t) => {
    const gate = new ConnectionGate(LIMITS);
    const silent = await admitAll(gate, from('10.0.0.1', 2));
    const [late] = await admitAll(gate, from('10.0.0.1', 1));
    t.ok(late!.destroyed, 'a silent newcomer over the share is refused');
    t.equal(alive(silent), 2, 'the silent sockets already placed stay');
    const [spoke] = await admitAll(gate, [new StandInSocket('10.0.0.1').speak()]);
    t.notOk(spoke!.destroyed, 'a newcomer that spoke is placed');
    t.ok(silent[0]!.destroyed, 'for the oldest silent socket of its address');
    t.notOk(silent[1]!.destroyed);
    const [again] = await admitAll(gate, [new StandInSocket('10.0.0.1')]);
    t.ok(again!.destroyed, 'a silent newcomer never pushes out one that spoke');
    t.notOk(spoke!.destroyed);
    await sleep(1);
    t.same(gate.counts, { arriving: 0, placed: 2, dropped: 3 });
  },
);

t.test(
  'all places taken: the oldest silent socket gives way to a newcomer that spoke, never to a silent one',
  async (t) => {
    const gate = new ConnectionGate(LIMITS);
    const silent = await admitAll(
      gate,
      ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4'].map((a) => new StandInSocket(a)),
    );
    const [quiet] = await admitAll(gate, from('10.0.0.5', 1));
    t.ok(
      quiet!.destroyed,
      'a silent newcomer is refused when no address holds more than one beyond its own',
    );
    const [spoke] = await admitAll(gate, [new StandInSocket('10.0.0.5').speak()]);
    t.notOk(spoke!.destroyed);
    t.same(
      silent.map((s) => s.destroyed),
      [true, false, false, false],
      'the oldest silent one gave way',
    );
  },
);

t.test(
  'all places taken by sockets that spoke: the fullest address gives up its oldest, only to an address holding two fewer',
  async (t) => {
    const gate = new ConnectionGate(LIMITS);
    const stalled = await admitAll(
      gate,
      [...from('10.0.0.1', 2), ...from('10.0.0.2', 1), ...from('10.0.0.3', 1)].map((s) =>
        s.speak(),
      ),
    );
    const [second] = await admitAll(gate, [new StandInSocket('10.0.0.2').speak()]);
    t.ok(
      second!.destroyed,
      'an address holding one is refused: the fullest holds only one beyond it',
    );
    const [fresh] = await admitAll(gate, [new StandInSocket('10.0.0.4').speak()]);
    t.notOk(fresh!.destroyed, 'an address holding none is placed');
    t.same(
      stalled.map((s) => s.destroyed),
      [true, false, false, false],
      'for the oldest socket of the fullest address',
    );
    t.equal(gate.counts.placed, LIMITS.max);
  },
);

t.test(
  'the first-bytes wait: bytes sent in it count, and the wait is bounded in all and per address',
  async (t) => {
    const gate = new ConnectionGate(LIMITS);
    await admitAll(gate, from('10.0.0.1', 2));
    const late = new StandInSocket('10.0.0.1');
    gate.admit(late);
    late.speak();
    await sleep(WAIT_MS * 4);
    t.notOk(late.destroyed, 'its ClientHello read during the wait: it spoke');

    // a wait that never runs out here: what is placed was placed at once
    const waiting = new ConnectionGate({ ...LIMITS, firstBytesWaitMs: 60_000 });
    const sockets = [...from('10.0.0.1', LIMITS.max), new StandInSocket('10.0.0.2')];
    for (const s of sockets.slice(0, -1)) waiting.admit(s);
    t.same(
      waiting.counts,
      { arriving: LIMITS.max, placed: 0, dropped: 0 },
      'arrivingPerAddress unset: one address may fill the wait',
    );
    waiting.admit(sockets.at(-1)!);
    t.same(
      waiting.counts,
      { arriving: LIMITS.max, placed: 1, dropped: 0 },
      'one more: the one waiting longest is placed at once',
    );

    const perAddress = new ConnectionGate({
      ...LIMITS,
      firstBytesWaitMs: 60_000,
      arrivingPerAddress: 2,
    });
    const three = from('10.0.0.1', 3);
    for (const s of three) perAddress.admit(s);
    t.same(
      perAddress.counts,
      { arriving: 2, placed: 1, dropped: 0 },
      "arrivingPerAddress 2: the address's one waiting longest is placed at once",
    );
    // closing clears their timers
    for (const s of [...sockets, ...three]) s.destroy();
    await sleep(1);
    t.same(
      perAddress.counts,
      { arriving: 0, placed: 0, dropped: 0 },
      'closed connections leave the gate',
    );
  },
);

t.test(
  'a released or closed connection holds nothing, and its wait running out places nothing',
  async (t) => {
    const gate = new ConnectionGate(LIMITS);
    const [kept, closed] = from('10.0.0.1', 2);
    gate.admit(kept!);
    gate.admit(closed!);
    gate.release(kept!);
    closed!.destroy();
    await sleep(WAIT_MS * 4);
    t.same(gate.counts, { arriving: 0, placed: 0, dropped: 0 });
    t.notOk(kept!.destroyed, 'release never closes the connection');
  },
);

t.test(
  "both servers' limits: one address flooding silent sockets holds its share and no more",
  async (t) => {
    const peer = {
      max: PEER_LIMITS.maxUnauthenticated,
      perAddress: PEER_LIMITS.maxUnauthenticatedPerAddress,
      arrivingPerAddress: PEER_LIMITS.maxUnauthenticatedPerAddress,
      firstBytesWaitMs: WAIT_MS,
    };
    for (const [name, limits] of [
      ['peer port', peer],
      ['metrics listener', { ...METRICS_CONNECTION_LIMITS, firstBytesWaitMs: WAIT_MS }],
    ] as const) {
      const gate = new ConnectionGate(limits);
      const flood = await admitAll(gate, from('2001:db8:1:2::7', 3 * limits.max));
      t.equal(
        alive(flood),
        limits.perAddress,
        `${name}: ${limits.perAddress} of ${flood.length} kept`,
      );
      const peers = await admitAll(gate, from('10.0.0.9', limits.perAddress));
      t.equal(
        alive(peers),
        limits.perAddress,
        `${name}: another address still gets its whole share`,
      );
    }
  },
);

t.test('addressKey: IPv4 as it is, IPv6 by its /64', async (t) => {
  t.equal(addressKey('::ffff:10.0.0.7'), '10.0.0.7');
  t.equal(addressKey('2001:db8:1:2:ffff::1'), '2001:db8:1:2::/64');
  t.equal(addressKey(undefined), '?');
});
