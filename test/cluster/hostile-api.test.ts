// Every `bundle cluster` command against the hostile stand-in API server (test/cluster/hostile-api.ts:
// huge, silent, trickling, redirecting, mistyped answers): each ends, by its deadline or a bound,
// with one `bundle: CODE: …` line naming the server, and exit 1. The bounds on lists, pages,
// nesting and messages are in hostile-api-bounds.test.ts.
import t from 'tap';
import { errorCode, bundle } from '../builder/lib.js';
import { hostileSetup } from './hostile-api-setup.js';
import type { Attack } from './hostile-api.js';

const { h, kubeconfig, server, commands } = await hostileSetup(t);

// The attacks judged by a bound, not the deadline, get a deadline a loaded CI machine meets:
// 64 MiB through a coverage-instrumented client took over 2 s there, and read as API_TIMEOUT.
const expected: [Attack, string, RegExp, string?][] = [
  ['silent', 'API_TIMEOUT', /gave no complete answer within 2 s/],
  ['trickle', 'API_TIMEOUT', /gave no complete answer within 2 s/],
  ['huge', 'API_TOO_LARGE', /an answer over 64 MiB/, '120'],
  ['redirect', 'API_REDIRECT', /redirected to http:\/\/127\.0\.0\.1:\d+: refused/],
  ['html-json', 'API_NOT_JSON', /"text\/html", not JSON/],
  ['html-page', 'API_NOT_JSON', /"text\/html; charset=utf-8", not JSON/],
  ['gzip', 'API_NOT_JSON', /a body encoded "gzip" \(none was asked for\)/],
  ['empty-json', 'API_NOT_JSON', /with an empty body/],
];

for (const [attack, code, message, timeout = '2'] of expected) {
  t.test(`hostile API stand-in, ${attack}: every command ends with one line ${code}`, async (t) => {
    h.attack = attack;
    // the four commands at once: one after another, the file outran tap's 300 s on CI
    const results = await Promise.all(commands.map(([, args]) => bundle([...args, '--kubeconfig', kubeconfig, '--request-timeout', timeout])));
    for (const [i, [name]] of commands.entries()) {
      const r = results[i]!;
      t.equal(r.code, 1, `${name}: exit 1`);
      t.equal(r.stderr.trimEnd().split('\n').length, 1, `${name}: one line (${r.stderr.slice(0, 300)})`);
      t.equal(errorCode(r.stderr), code, `${name}: ${r.stderr.slice(0, 300)}`);
      t.match(r.stderr, message, name);
      t.match(r.stderr, server, `${name} names the server`);
    }
    t.equal(h.elsewhereHits, 0, 'the other server was never asked');
  });
}

