// The bootstrap's refusal on a booted node (openshift-node.ts): a stick whose agent image is
// signed by a key the node does not trust. Nothing is loaded, the agent does not start, the
// journal says why, and the technician reads it on the console, where a real agetty
// (nspawn's read-only console) shows /run/issue.d above the login prompt.
import t from 'tap';
import { nodeSkipReason } from '../helpers/node.js';
import { until } from '../helpers/until.js';
import { openshiftNode } from './openshift-node.js';

const skip = nodeSkipReason();
if (skip) t.plan(0, skip);
else {
  t.setTimeout(1_500_000);
  t.test(
    'a stick signed by another key: the bootstrap loads nothing and says so on the console',
    async (t) => {
      const { stick, agentDigest, node, diag } = await openshiftNode(t, {
        signedByAnotherKey: true,
        console: 'read-only',
      });
      await node.plugStick(stick);
      const line = await until(
        'the bootstrap refuses',
        async () => {
          const r = await node.run(['cat', '/run/issue.d/bundle-agent.issue']);
          return r.code === 0 && /not signed/.test(r.stdout) ? r.stdout.trim() : undefined;
        },
        { timeoutMs: 120_000, stepMs: 250, detail: diag },
      );
      t.match(
        line,
        /The agent image on the USB stick is not signed by this cluster's key: nothing was loaded/,
        `console line: ${line}`,
      );
      t.match(
        await node.journal('bundle-agent-bootstrap.service'),
        /bundle-agent-bootstrap: .*(signature|signed|key)/i,
        'the journal says why',
      );
      t.equal(
        (
          await node.run([
            'podman',
            'image',
            'exists',
            `localhost/offline-bundle/bundle-agent@${agentDigest}`,
          ])
        ).code,
        1,
        'no agent image in storage',
      );
      t.not(
        (
          await node.run([
            'test',
            '-e',
            '/etc/containers/systemd/bundle-agent.container.d/image.conf',
          ])
        ).code,
        0,
        'no drop-in written',
      );
      t.equal(
        (await node.systemctl('is-active', 'bundle-agent.service')).stdout.trim(),
        'inactive',
        'the agent is not started',
      );
      await until(
        'agetty shows the line',
        async () =>
          /not signed by this cluster's key[^\n]*\r?\n(?:.*\r?\n)*?node-a login:/.test(
            node.console(),
          )
            ? true
            : undefined,
        {
          timeoutMs: 30_000,
          stepMs: 250,
          detail: async () => JSON.stringify(node.console().slice(-1500)),
        },
      );
      t.pass(
        "a real agetty on the node's console printed the bootstrap's line above the login prompt",
      );
    },
  );
}
