// The unit as shipped: systemd's own checks. `systemd-analyze verify` parses it (and each
// runtime drop-in) as systemd would load it; `security --offline=true` rates its exposure, which
// must stay at or below 4.0 (it was 6.6 before the hardening).
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { chmod, cp, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';

const SYSTEMD = new URL('../../systemd/', import.meta.url).pathname;
const UNIT = join(SYSTEMD, 'bundle-agent.service');

t.test(
  'bundle-agent.service: systemd-analyze security --offline=true rates it 4.0 or lower',
  async (t) => {
    const r = spawnSync('systemd-analyze', ['security', '--offline=true', '--no-pager', UNIT], {
      encoding: 'utf8',
    });
    const m = `${r.stdout}${r.stderr}`.match(
      /Overall exposure level for bundle-agent\.service: ([\d.]+)/,
    );
    t.ok(m, `an overall rating (${r.stderr.slice(0, 300)})`);
    const score = Number(m?.[1]);
    t.ok(score <= 4.0, `exposure ${score} <= 4.0`);
    // --threshold makes systemd-analyze itself fail above the target.
    t.equal(
      spawnSync('systemd-analyze', [
        'security',
        '--offline=true',
        '--threshold=40',
        '--no-pager',
        UNIT,
      ]).status,
      0,
      'passes --threshold=40',
    );
  },
);

t.test('bundle-agent.service: systemd-analyze verify, with each runtime drop-in', async (t) => {
  for (const runtime of ['crio', 'containerd']) {
    const dir = await tmpdir(t, 'ob-unit-');
    const stub = join(dir, 'bundle-agent');
    await writeFile(stub, '#!/bin/sh\n');
    await chmod(stub, 0o755);
    // As install.sh writes it: ExecStart at the prefix, the runtime's drop-in as runtime.conf.
    const unit = (await readFile(UNIT, 'utf8')).replaceAll('/usr/local/bin/bundle-agent', stub);
    await writeFile(join(dir, 'bundle-agent.service'), unit);
    await cp(
      join(SYSTEMD, 'bundle-agent.service.d', `${runtime}.conf`),
      join(dir, 'bundle-agent.service.d', 'runtime.conf'),
      { recursive: true },
    );
    const r = spawnSync('systemd-analyze', ['verify', 'bundle-agent.service'], {
      encoding: 'utf8',
      env: { ...process.env, SYSTEMD_UNIT_PATH: `${dir}:` },
    });
    t.equal(r.status, 0, `${runtime}: verify exits 0 (${r.stderr})`);
    t.equal(r.stderr.trim(), '', `${runtime}: no warnings`);
    const shown = await readFile(join(dir, 'bundle-agent.service.d', 'runtime.conf'), 'utf8');
    t.match(
      shown,
      runtime === 'crio' ? /^Wants=crio\.service$/m : /^Wants=containerd\.service$/m,
      `${runtime}: Wants= its own runtime only`,
    );
  }
});

t.test(
  'bundle-agent.service: every capability kept is explained, Documentation is installed',
  async (t) => {
    const unit = await readFile(UNIT, 'utf8');
    const caps =
      unit
        .match(/^CapabilityBoundingSet=(.*)$/m)?.[1]
        ?.split(/\s+/)
        .filter(Boolean) ?? [];
    for (const c of caps)
      t.match(unit, new RegExp(`^#\\s+${c}\\s+\\S`, 'm'), `${c} has a comment saying why`);
    t.notMatch(unit, /^Wants=crio/m, 'no Wants=crio.service in the base unit');
    t.match(unit, /^StateDirectory=bundle-agent$/m);
    const doc = unit.match(/^Documentation=file:\/\/(\S+)/m)?.[1];
    t.equal(
      doc,
      '/usr/local/share/doc/bundle-agent/README.md',
      'Documentation= names a file the tarball installs (install.sh rewrites the prefix)',
    );
  },
);
