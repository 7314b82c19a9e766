// tier: unit
// A watch's body read a chunk at a time (cluster-watch.ts WatchEventReader): one JSON event per
// line whatever the chunks' cuts, each line bounded before it is parsed, at most so many events
// and so many bytes a second, an ERROR event turned into the error the caller acts on (410: list again).
import t from 'tap';
import {
  ClusterError,
  MAX_WATCH_BYTES_PER_SECOND,
  MAX_WATCH_EVENT_BYTES,
  MAX_WATCH_EVENTS_PER_SECOND,
  WatchEventReader,
  type WatchEvent,
} from '@offline-bundle/kube';

/** What `fn` threw (undefined when it did not). */
function thrown(fn: () => void): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}
const line = (type: string, object: unknown) => `${JSON.stringify({ type, object })}\n`;
const reader = () => {
  const got: WatchEvent[] = [];
  return { got, r: new WatchEventReader('watch things', (e) => got.push(e)) };
};

t.test(
  'events cut anywhere by the chunks, blank lines and CRLF between them, are read whole and in order',
  async (t) => {
    const text =
      line('ADDED', { metadata: { name: 'a', resourceVersion: '5' } }) +
      '\r\n\n' +
      line('BOOKMARK', { metadata: { resourceVersion: '9' } }) +
      line('DELETED', { metadata: { name: 'a' } });
    for (const cut of [1, 2, 7, 13, text.length]) {
      const { got, r } = reader();
      const bytes = Buffer.from(text);
      for (let i = 0; i < bytes.length; i += cut) r.feed(bytes.subarray(i, i + cut));
      t.same(
        got.map((e) => e.type),
        ['ADDED', 'BOOKMARK', 'DELETED'],
        `chunks of ${cut} bytes`,
      );
    }
  },
);

t.test(
  'a line past MAX_WATCH_EVENT_BYTES is refused before its end arrives, in one line naming the bound',
  async (t) => {
    const { got, r } = reader();
    const half = Buffer.alloc(MAX_WATCH_EVENT_BYTES / 2, 0x61);
    r.feed(half);
    r.feed(half);
    const err = thrown(() => r.feed(Buffer.from('a')));
    t.ok(err instanceof ClusterError);
    t.match(err, {
      code: 'API_TOO_LARGE',
      message: /^[^\n]*over 2 MiB to watch things: refused unread[^\n]*$/,
    });
    t.same(got, []);
  },
);

t.test(
  'past MAX_WATCH_EVENTS_PER_SECOND in one second the stream is refused; the events before it were read',
  async (t) => {
    const { got, r } = reader();
    const many = line('MODIFIED', { metadata: { name: 'a' } }).repeat(
      MAX_WATCH_EVENTS_PER_SECOND + 1,
    );
    t.match(
      thrown(() => r.feed(Buffer.from(many))),
      { code: 'API_TOO_FAST', message: /over 50 watch events in one second/ },
    );
    t.equal(got.length, MAX_WATCH_EVENTS_PER_SECOND);
  },
);

t.test(
  'past MAX_WATCH_BYTES_PER_SECOND in one second the stream is refused (large events well under the event rate); the events before it were read',
  async (t) => {
    const { got, r } = reader();
    // the largest event that passes, fed in 64 KiB chunks as a socket delivers it
    const big = Buffer.from(
      line('MODIFIED', {
        metadata: { name: 'a', annotations: { p: 'x'.repeat(MAX_WATCH_EVENT_BYTES - 200) } },
      }),
    );
    const feed = () => {
      for (let i = 0; i < big.length; i += 65536) r.feed(big.subarray(i, i + 65536));
    };
    const fits = Math.floor(MAX_WATCH_BYTES_PER_SECOND / big.length);
    for (let i = 0; i < fits; i++) feed();
    t.equal(
      got.length,
      fits,
      `${fits} events of ${(big.length / 1024 / 1024).toFixed(2)} MiB within the second's bytes`,
    );
    t.match(thrown(feed), {
      code: 'API_TOO_FAST',
      message: new RegExp(
        `^[^\\n]*over ${MAX_WATCH_BYTES_PER_SECOND / 1024 / 1024} MiB of watch events in one second to watch things: the watch is dropped[^\\n]*$`,
      ),
    });
    t.ok(fits < MAX_WATCH_EVENTS_PER_SECOND, 'refused by its bytes, far below the event rate');
  },
);

t.test(
  'an ERROR event is the error: 410 Expired API_GONE, 403 FORBIDDEN; a line that is no event is refused',
  async (t) => {
    const status = (code: number, message: string) => ({
      kind: 'Status',
      status: 'Failure',
      code,
      message,
    });
    t.match(
      thrown(() =>
        reader().r.feed(Buffer.from(line('ERROR', status(410, 'too old resource version: 1 (5)')))),
      ),
      { code: 'API_GONE', message: /410: too old resource version/ },
    );
    t.match(
      thrown(() => reader().r.feed(Buffer.from(line('ERROR', status(403, 'forbidden'))))),
      { code: 'FORBIDDEN' },
    );
    t.match(
      thrown(() => reader().r.feed(Buffer.from('<html>\n'))),
      { code: 'API_NOT_JSON' },
    );
    t.match(
      thrown(() => reader().r.feed(Buffer.from(line('SOMETHING', {})))),
      { code: 'API_NOT_JSON' },
    );
    t.match(
      thrown(() =>
        reader().r.feed(
          Buffer.from(`{"type":"ADDED","object":${'['.repeat(200)}${']'.repeat(200)}}\n`),
        ),
      ),
      { code: 'API_TOO_LARGE', message: /nested deeper/ },
    );
  },
);
