// Preloaded (NODE_OPTIONS=--import) by bench/peers-profile.mjs into every node process of the
// run; only the one whose command line holds OB_GC_WATCH_MARK reports: its garbage collections
// (count and milliseconds by kind) and heap, every second, to OB_GC_WATCH_DIR/gc-PID.json.
import { renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PerformanceObserver, constants } from 'node:perf_hooks';

/** How often the figures are written (the profile reads the last before the approval and after the end). */
const WRITE_MS = 1000;
const mark = process.env.OB_GC_WATCH_MARK;
const dir = process.env.OB_GC_WATCH_DIR;
const KINDS = {
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};

if (mark && dir && process.argv.some((a) => a.includes(mark))) {
  const gc = {};
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const k = KINDS[e.detail?.kind] ?? 'other';
      gc[k] ??= { n: 0, ms: 0 };
      gc[k].n++;
      gc[k].ms += e.duration;
    }
  }).observe({ entryTypes: ['gc'] });
  const file = join(dir, `gc-${process.pid}.json`);
  setInterval(() => {
    const m = process.memoryUsage();
    writeFileSync(
      `${file}.tmp`,
      JSON.stringify({
        at: Date.now(),
        cpu: process.cpuUsage(),
        heapUsed: m.heapUsed,
        heapTotal: m.heapTotal,
        external: m.external,
        arrayBuffers: m.arrayBuffers,
        rss: m.rss,
        gc,
      }),
    );
    renameSync(`${file}.tmp`, file);
  }, WRITE_MS).unref();
}
