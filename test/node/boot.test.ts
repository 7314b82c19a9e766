// The booted-node harness itself (test/helpers/node.ts): a root under real systemd, commands
// run by the node's systemd under nspawn's seccomp filter, a network with no way out, a stick
// plugged while the node runs, and a teardown that leaves no mount, cgroup or process behind.
import t from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';
import { bootNode, buildRoot, makeBridge, nodeSkipReason } from '../helpers/node.js';

const skip = nodeSkipReason();
if (skip) t.plan(0, skip);
else {
  t.setTimeout(900_000);
  t.test('a node boots under its own systemd and runs what it is given', async (t) => {
    const root = await buildRoot();
    t.comment(
      `node root ${root.dir} (${root.buildMs ? `built in ${(root.buildMs / 1000).toFixed(1)} s` : 'cached'})`,
    );
    const bridge = await makeBridge(t);
    const node = await bootNode(t, {
      root: root.dir,
      bridge,
      hostname: 'node-a',
      files: { '/etc/motd-test': 'hello\n' },
    });
    t.comment(`booted in ${(node.bootMs / 1000).toFixed(1)} s`);
    const pid1 = await node.must(['cat', '/proc/1/comm']);
    t.equal(pid1.trim(), 'systemd', 'PID 1 in the node is systemd');
    t.equal((await node.must(['hostname'])).trim(), 'node-a', 'hostname');
    t.equal(
      await node.must(['cat', '/etc/motd-test']),
      'hello\n',
      'files written before boot are there',
    );
    t.match(
      await node.must(['grep', 'Seccomp_filters', '/proc/self/status']),
      /Seccomp_filters:\s+[1-9]/,
      'commands run under the seccomp filter of the node',
    );
    const status = await node.run(['sh', '-c', 'echo out; echo err >&2; exit 3']);
    t.same(
      [status.code, status.stdout, status.stderr],
      [3, 'out\n', 'err\n'],
      'exit code, stdout and stderr come back apart',
    );
    t.match(
      await node.must(['ip', '-4', '-o', 'addr', 'show', 'host0']),
      new RegExp(`inet ${node.address.replace(/\./g, '\\.')}/24`),
      'address on the bridge',
    );
    t.notMatch(
      await node.must(['ip', 'route']),
      /default/,
      'no default route: nothing but the bridge is reachable',
    );
    t.match(
      await node.must([
        'podman',
        'info',
        '--format',
        '{{.Store.GraphDriverName}} {{.Store.GraphRoot}}',
      ]),
      /overlay \/var\/lib\/containers\/storage/,
      'podman: overlay storage on the node ext4',
    );
    t.match(await node.journal(), /Reached target/, 'journal readable');

    const dir = await tmpdir(t, 'ob-node-boot-');
    const img = join(dir, 'stick.img');
    execFileSync('truncate', ['-s', '16M', img]);
    execFileSync('mkfs.ext4', ['-q', '-F', '-L', 'STICK', img]);
    const mnt = join(dir, 'fill');
    execFileSync('mkdir', ['-p', mnt]);
    execFileSync('mount', ['-o', 'loop', img, mnt]);
    execFileSync('sh', ['-c', `echo payload > ${mnt}/file.txt`]);
    execFileSync('umount', [mnt]);
    const at = await node.plugStick(img);
    t.match(
      at,
      /^\/run\/media\/bundle-agent\/loop\d+$/,
      'appears where the udev rule mounts sticks',
    );
    t.equal(
      await node.must(['cat', `${at}/file.txt`]),
      'payload\n',
      'the stick is readable in the node',
    );
    t.match(await node.must(['findmnt', '-no', 'OPTIONS', at]), /\bro\b/, 'mounted read-only');
    await node.unplugStick(at);
    t.not((await node.run(['test', '-e', `${at}/file.txt`])).code, 0, 'unplugged');

    const machine = node.machine;
    await node.stop();
    t.notOk(readFileSync('/proc/self/mounts', 'utf8').includes(machine), 'no mount left');
    t.notOk(existsSync(`/sys/fs/cgroup/unified/nodes/${machine}`), 'no cgroup left');
    t.notOk(existsSync(`/var/tmp/ob-nodes/${machine}`), 'no directory left');
  });
}
