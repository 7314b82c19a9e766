// The agent over time, with a real containerd: a SIGKILLed daemon is reported as not running
// (and its stale line replaced as soon as it starts again, on the console and in the
// cluster), and images that vanish from the runtime come back from a layout kept on disk,
// with no stick, pinned again.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { chmod, copyFile, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { until } from '../helpers/until.js';
import { parse as parseYaml } from 'yaml';
import { CriImageClient } from '@offline-bundle/runtime';
import { partialBundle } from '@offline-bundle/format';
import { tmpdir } from '../helpers/tmp.mjs';
import { startFakeApi, writeKubeconfig } from '../status/lib.js';
import { AGENT, containerdNode, daemonChild, makeBundle, run } from './fixtures.js';

const images = [{ name: 'quay.io/acme/app:v1', files: { 'app.txt': 'app v1' } }];
const ISSUE = 'run/issue.d/bundle-agent.issue';

async function node(t: any, extra: string) {
  const { dir, keys, root, ctd, config } = await containerdNode(t, 'ob-agent-life-', extra);
  const drop = join(root, 'var/lib/bundle-agent/drop');
  execFileSync('mkdir', ['-p', drop]);
  const statusFile = join(root, 'var/lib/bundle-agent/status.json');
  const status = () => readFile(statusFile, 'utf8').then(JSON.parse, () => undefined);
  const file = await makeBundle(dir, {
    key: keys.key,
    version: '1.1.0',
    images,
    upgradeFrom: ['1.0.0'],
    out: join(dir, 'update.bundle'),
  });
  return { dir, root, config, ctd, drop, status, statusFile, file };
}

t.test(
  'a daemon killed mid-pre-load: status says it is not running (exit 3); the next start replaces the stale line at once, on the console and in the cluster',
  async (t) => {
    const api = await startFakeApi(0, 'node-a');
    t.teardown(() => api.close());
    // a pull that never ends, so the kill lands mid-pre-load; it records its pid for the cleanup
    const n0 = await tmpdir(t, 'ob-agent-life-pull-');
    const pidFile = join(n0, 'pull.pid');
    const puller = join(n0, 'slow-pull.sh');
    await writeFile(puller, `#!/bin/sh\necho $$ > ${pidFile}\nexec sleep 300\n`);
    await chmod(puller, 0o755);
    const n = await node(
      t,
      `preload:
  method: command
  command: [${JSON.stringify(puller)}]
  concurrency: 1
status:
  kubeconfig: /etc/bundle-agent/kubeconfig
  heartbeatSeconds: 1
`,
    );
    await writeKubeconfig(join(n.root, 'etc/bundle-agent/kubeconfig'), api.port);
    t.teardown(async () => {
      const pid = Number(await readFile(pidFile, 'utf8').catch(() => '0'));
      if (pid)
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          /* gone */
        }
    });
    await copyFile(n.file, join(n.drop, 'update.bundle'));

    const first = daemonChild(t, n.config, n.statusFile);
    await first.until(
      'the puller runs, the agent Preloading',
      async (s) =>
        s?.phase === 'Preloading' && (await readFile(pidFile, 'utf8').catch(() => '')) !== '',
    );
    const live = await run(AGENT, ['status', '--config', n.config]);
    t.equal(live.code, 0, 'while it runs: exit 0');
    t.match(
      live.stdout,
      /^Loading images: 0 of 1 done\./,
      'and its own line, counting images as bundle inspect does (one image, pulled by tag and digest)',
    );
    await first.stop('SIGKILL');
    process.kill(Number(await readFile(pidFile, 'utf8')), 'SIGKILL');

    const dead = await run(AGENT, ['status', '--config', n.config]);
    t.equal(dead.code, 3, 'killed: exit 3, as systemctl status answers for a stopped unit');
    t.match(
      dead.stdout,
      /^The bundle agent is not running\. It stopped while loading the update 1\.1\.0, which did not finish\./,
      'says so, not "Loading images"',
    );
    t.notMatch(
      dead.stdout,
      /Loading images|You may remove/,
      "the dead agent's words are not repeated as current",
    );
    const deadJson = await run(AGENT, ['status', '--config', n.config, '--json']);
    t.equal(deadJson.code, 3);
    t.equal(JSON.parse(deadJson.stdout).agent, 'stopped', '--json: agent stopped');
    t.match(
      await readFile(join(n.root, ISSUE), 'utf8'),
      /Loading images/,
      'a SIGKILL leaves the console line as it was, until the next start',
    );

    // next start, no stick: the stale line goes at once
    await rm(join(n.drop, 'update.bundle'));
    const sentBefore = api.accepted().length;
    const second = daemonChild(t, n.config, n.statusFile);
    await second.until('the console says the last run stopped', async () =>
      /stopped before it finished/.test(await readFile(join(n.root, ISSUE), 'utf8')),
    );
    t.equal(
      await readFile(join(n.root, ISSUE), 'utf8'),
      'Update: Failed: The update was stopped before it finished. Load the update file again to restart it.\n\n',
      'the console says what happened, in plain words',
    );
    const restarted = await run(AGENT, ['status', '--config', n.config]);
    t.equal(restarted.code, 0, 'running again: exit 0');
    t.equal(
      restarted.stdout,
      'Failed: The update was stopped before it finished. Load the update file again to restart it.\n',
    );
    await second.until('a status written to the cluster', () =>
      api
        .accepted()
        .slice(sentBefore)
        .some((r) => r.path.endsWith('/node-a/status')),
    );
    await second.stop();
    const sent = api
      .accepted()
      .slice(sentBefore)
      .filter((r) => r.path.endsWith('/node-a/status'));
    const failed = parseYaml(sent[0]!.body).status.conditions.find((c: any) => c.type === 'Failed');
    t.equal(
      failed?.reason,
      'Interrupted',
      'the cluster hears the same with the first report of the new start',
    );
    t.match(failed?.message, /stopped before the load finished/);
    // the staging was whole when the kill came: it stays only as a marked partial, which the next
    // load of this bundle re-hashes instead of reading the stick again (issue #41's one door)
    t.same(
      await readdir(join(n.root, 'var/lib/upgrade')).catch(() => []),
      ['1.1.0-amd64.partial'],
      'no staged layout left, only the marked partial',
    );
    t.ok(
      await partialBundle(join(n.root, 'var/lib/upgrade/1.1.0-amd64.partial')),
      'under a resume marker naming its bundle',
    );
    t.same(await readdir(join(n.root, 'etc/containerd/certs.d')), [], 'no hosts.toml left');
    const stopped = await run(AGENT, ['status', '--config', n.config]);
    t.equal(stopped.code, 3, 'stopped with SIGTERM: not running either');
    t.match(
      stopped.stdout,
      /^The bundle agent is not running\. Its last report: Failed: The update was stopped/,
    );
  },
);

t.test(
  'staging.keep untilComplete: images deleted from the runtime come back at the next start from the kept layout, pinned again, with no stick',
  async (t) => {
    const n = await node(t, 'staging:\n  keep: untilComplete\n');
    const loaded = await run(
      AGENT,
      ['load', n.file, '--config', n.config, '--json'],
      process.env,
      300_000,
    );
    t.equal(loaded.code, 0, `load (${loaded.stderr.slice(-400)})`);
    const layout = join(n.root, 'var/lib/upgrade/1.1.0-amd64');
    t.ok(
      (await readdir(layout)).includes('bundle.json'),
      'the verified layout is kept (1.1.0 is not complete yet)',
    );
    const ctr = (...args: string[]) =>
      execFileSync('ctr', ['-a', n.ctd.socket, '-n', 'k8s.io', 'images', ...args], {
        encoding: 'utf8',
      });
    const pinnedNames = () =>
      ctr('ls')
        .split('\n')
        .filter((l) => l.includes('io.cri-containerd.pinned=pinned'))
        .map((l) => l.split(/\s+/)[0]);
    t.ok(pinnedNames().includes('quay.io/acme/app:v1'), 'pinned after the load');

    // the runtime loses them (a wiped store): every name of every image goes
    const cri = new CriImageClient(n.ctd.socket);
    t.teardown(() => cri.close());
    ctr('rm', ...(await cri.listImages()).flatMap((i) => [...i.repoTags, ...i.repoDigests, i.id]));
    // the CRI plugin learns of the removals from containerd's events, a moment after `ctr rm` returns
    await until('containerd holds no image', async () => (await cri.listImages()).length === 0, {
      timeoutMs: 30_000,
      stepMs: 100,
    });

    const d = daemonChild(t, n.config, n.statusFile);
    await d.until(
      'restored',
      (s, log) =>
        /event=restore/.test(log) &&
        s?.conditions?.some((c: any) => c.type === 'Ready' && c.reason === 'Restored'),
    );
    const log = await d.stop();
    t.match(
      log,
      /images of 1\.1\.0 are gone from the runtime \(2 of their 2 names\); loading them again from the kept layout/,
      'the journal says why',
    );
    t.ok(
      (await cri.listImages()).some((i) => i.repoTags.includes('quay.io/acme/app:v1')),
      'the image is back',
    );
    t.ok(pinnedNames().includes('quay.io/acme/app:v1'), 'and pinned again');
    const s = await n.status();
    t.equal(s.phase, 'Ready');
    t.match(
      s.conditions.find((c: any) => c.type === 'Ready').message,
      /^1 of the 1 image of 1\.1\.0 had vanished from the runtime and were loaded again from the layout kept on this node/,
    );
    const st = await run(AGENT, ['status', '--config', n.config]);
    t.match(
      st.stdout,
      /Done: update 1\.1\.0 is loaded on this node again \(parts of it had gone missing and were put back from this node's disk\)/,
      'status says so',
    );

    // releases with containerd's pin label: listed kept and pinned; forget unlabels and removes the layout
    const list = JSON.parse(
      (await run(AGENT, ['releases', 'list', '--config', n.config, '--json'])).stdout,
    );
    // pinned as the status says: containerd 1.6 keeps the label but its CRI reports no pins (Unknown), 1.7 reports them (True)
    const pinnedCond = s.conditions.find((c: any) => c.type === 'Pinned');
    const expected = (await cri.listImages()).some((i) => i.pinned) ? 'yes' : 'unknown';
    t.equal(
      pinnedCond?.status,
      expected === 'yes' ? 'True' : 'Unknown',
      'the Pinned condition says the same',
    );
    t.same(
      list.releases.map((r: any) => [r.version, r.pinned, r.imagesPresent, r.images, r.layout]),
      [['1.1.0', expected, 1, 1, layout]],
      'one image (two names), pinned as the runtime reports',
    );
    const f = await run(AGENT, ['releases', 'forget', '1.1.0', '--config', n.config]);
    t.equal(f.code, 0, f.stderr);
    t.match(
      f.stdout,
      /forgot 1\.1\.0 \(amd64\): 1 image unpinned, layout .* removed, records dropped/,
    );
    t.same(pinnedNames(), [], 'no image carries the pin label any more');
    await t.rejects(readdir(layout), { code: 'ENOENT' }, 'the kept layout is gone');
  },
);
