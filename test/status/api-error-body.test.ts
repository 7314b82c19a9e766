// tier: unit
// An API error answer is read only to MAX_API_ERROR_BYTES (cluster-http.ts): what is kept of a
// Status cut there is the start of its message, decoded, whatever byte the cut fell on.
import t from 'tap';
import { MAX_API_ERROR_BYTES, messageStart } from '@offline-bundle/kube';

const status = (message: string) =>
  JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 500, message });

t.test('a whole Status: its message', async (t) => {
  t.equal(
    messageStart(status('nodes "x" is forbidden: "quoted" \\ and\nlines')),
    'nodes "x" is forbidden: "quoted" \\ and\nlines',
  );
  t.equal(messageStart(status('')), '');
  t.equal(messageStart('{"kind":"Status"}'), '', 'no message: nothing');
  t.equal(messageStart('<html>Bad gateway</html>'), '', 'not JSON: nothing');
});

t.test(
  'a Status cut at every byte of an escaped message: a prefix of the message, never a throw',
  async (t) => {
    const message = 'the server is on fire\n"é" \\ \u2603 tab\there';
    const text = status(message);
    const start = text.indexOf('"message":"') + '"message":"'.length;
    let prefixes = 0;
    for (let cut = 0; cut <= text.length; cut++) {
      const got = messageStart(text.slice(0, cut));
      if (!message.startsWith(got)) t.fail(`cut at ${cut}: "${got}" is not a prefix`);
      else prefixes++;
    }
    t.equal(prefixes, text.length + 1, 'every cut gives a prefix');
    t.equal(messageStart(text.slice(0, start + 5)), 'the s', 'as much as was read');
  },
);

t.test('the bound is small next to a Status yet holds a long message', async (t) => {
  t.ok(
    MAX_API_ERROR_BYTES >= 4096 && MAX_API_ERROR_BYTES <= 1024 * 1024,
    `${MAX_API_ERROR_BYTES} bytes`,
  );
  const big = status('the server is on fire\n'.repeat(10_000)).slice(0, MAX_API_ERROR_BYTES);
  t.match(messageStart(big), /^the server is on fire\nthe server is on fire\n/);
});
