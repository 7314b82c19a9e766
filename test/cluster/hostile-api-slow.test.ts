// `bundle cluster` against the hostile stand-in API server, the bounds that take time: pages that
// come slowly and never end (the command's --deadline), and an error whose message is 50 MiB (read
// only to MAX_API_ERROR_BYTES). Each ends with one line naming the server. (Split from
// hostile-api-bounds.test.ts so that each file stays well inside tap's 300 s on a loaded machine.)
import t from 'tap';
import { errorCode, bundle } from '../builder/lib.js';
import { hostileSetup } from './hostile-api-setup.js';

const { h, kubeconfig, server, commands } = await hostileSetup(t);

t.test(
  'a server answering each page after 2 s with another continue token: the command ends at --deadline, one line',
  async (t) => {
    h.attack = 'slow-pages';
    h.pages = 0;
    const r = await bundle([
      'cluster',
      'status',
      '--kubeconfig',
      kubeconfig,
      '--request-timeout',
      '3',
      '--deadline',
      '5',
    ]);
    t.equal(r.code, 1);
    t.equal(r.stderr.trimEnd().split('\n').length, 1, r.stderr);
    t.equal(errorCode(r.stderr), 'API_TIMEOUT', r.stderr);
    t.match(r.stderr, /did not finish answering this command's calls within 5 s in all/);
    t.match(r.stderr, server);
    t.ok(h.pages <= 4, `cut after ${h.pages} pages, not 800`);
  },
);

t.test(
  'an API error whose Status message is 50 MiB over many lines: one line, the message cut',
  async (t) => {
    h.attack = 'long-message';
    for (const [name, args] of commands) {
      const r = await bundle([...args, '--kubeconfig', kubeconfig, '--request-timeout', '20']);
      t.equal(r.code, 1, `${name}: exit 1`);
      t.equal(errorCode(r.stderr), 'API_ERROR', `${name}: ${r.stderr.slice(0, 300)}`);
      t.equal(r.stderr.trimEnd().split('\n').length, 1, `${name}: one line`);
      t.ok(r.stderr.length < 1000, `${name}: ${r.stderr.length} characters`);
      t.match(r.stderr, /answered 500 to .*: the server is on fire the server is on fire/);
    }
  },
);
