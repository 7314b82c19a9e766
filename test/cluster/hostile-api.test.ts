// Every `bundle cluster` command against the hostile stand-in API server (test/cluster/hostile-api.ts):
// silent, trickling, huge and redirecting answers; each ends, by its deadline or a bound, with one
// `bundle: CODE: …` line naming the server, and exit 1. Mistyped answers are in
// hostile-api-types.test.ts, the bounds on lists, pages, nesting and messages in hostile-api-bounds.test.ts
// and hostile-api-slow.test.ts (split so that each file stays well inside tap's 300 s on a loaded machine).
import t from 'tap';
import { everyCommandRefuses, hostileSetup } from './hostile-api-setup.js';

// The attacks judged by a bound, not the deadline, get a deadline a loaded CI machine meets:
// 64 MiB through a coverage-instrumented client took over 2 s there, and read as API_TIMEOUT.
everyCommandRefuses(t, await hostileSetup(t), [
  ['silent', 'API_TIMEOUT', /gave no complete answer within 2 s/],
  ['trickle', 'API_TIMEOUT', /gave no complete answer within 2 s/],
  ['huge', 'API_TOO_LARGE', /an answer over 64 MiB/, '120'],
  ['redirect', 'API_REDIRECT', /redirected to http:\/\/127\.0\.0\.1:\d+: refused/],
]);
