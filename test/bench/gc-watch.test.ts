// The peers profile's garbage-collection watch (bench/lib/gc-watch.mjs), preloaded into every
// node process of a run: only the process whose command line holds the mark writes its
// collections and heap, atomically, every second; any other stays silent.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { tmpdir } from '../helpers/tmp.mjs';

const WATCH = join(import.meta.dirname, '../../bench/lib/gc-watch.mjs');
// garbage and a forced full collection, then long enough for a write
const SCRIPT =
  'let k=[];for(let i=0;i<2e5;i++)k.push({i});k=null;globalThis.gc();setTimeout(()=>{},1500)';

function run(dir: string, arg: string) {
  const r = spawnSync(
    process.execPath,
    ['--expose-gc', `--import=${WATCH}`, '-e', SCRIPT, '--', arg],
    {
      env: { ...process.env, OB_GC_WATCH_MARK: 'ob-peers-node-1-', OB_GC_WATCH_DIR: dir },
      encoding: 'utf8',
    },
  );
  if (r.status !== 0) throw new Error(r.stderr);
  return r.pid;
}

t.test('the marked process writes its collections and heap; another writes nothing', async (t) => {
  const dir = await tmpdir(t, 'ob-gc-watch-');
  run(dir, '--config=/tmp/ob-peers-node-0-x/config.yaml');
  t.same(readdirSync(dir), [], 'not the receiving node: nothing written');
  const pid = run(dir, '--config=/tmp/ob-peers-node-1-x/config.yaml');
  t.same(readdirSync(dir), [`gc-${pid}.json`], 'one file, no temp file left');
  const g = JSON.parse(readFileSync(join(dir, `gc-${pid}.json`), 'utf8'));
  t.ok(g.gc.major?.n >= 1, 'the forced full collection is counted as major');
  t.ok(g.heapUsed > 0 && g.rss >= g.heapUsed, 'the heap and rss');
});
