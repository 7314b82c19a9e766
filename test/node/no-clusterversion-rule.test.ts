// The same empty OpenShift node as stick-install.test.ts (openshift-node.ts), but the API
// stand-in enforces the shipped RBAC without the ClusterVersion rule (ClusterRole
// offline-bundle:running-version-reader and its binding taken out of deploy/rbac.yaml), as
// OpenShift's own node rights leave it: the node's read of ClusterVersion "version" is refused
// (403), the bundle is not loaded, and the status the node writes names ClusterVersion as the
// cause. This is the "Done when" check that the rule is what makes the load work.
import t from 'tap';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SHIPPED_RBAC } from '../helpers/kube-standin.js';
import { nodeSkipReason } from '../helpers/node.js';
import { until } from '../helpers/until.js';
import { tmpdir } from '../helpers/tmp.mjs';
import { openshiftNode } from './openshift-node.js';

const skip = nodeSkipReason();
if (skip) t.plan(0, skip);
else {
  t.setTimeout(1_500_000);
  t.test(
    'without the ClusterVersion rule, the node cannot load and its status names the cause',
    async (t) => {
      const dir = await tmpdir(t, 'ob-node-norule-');
      const docs = readFileSync(SHIPPED_RBAC[0]!, 'utf8').split(/^---$/m);
      const kept = docs.filter((d) => !/name: offline-bundle:running-version-reader/.test(d));
      t.equal(
        docs.length - kept.length,
        2,
        'deploy/rbac.yaml has the ClusterVersion ClusterRole and binding; both taken out',
      );
      const rbac = join(dir, 'rbac-without-clusterversion.yaml');
      writeFileSync(rbac, kept.join('---'));
      const { api, stick, node, diag } = await openshiftNode(t, {
        rbacFiles: [rbac, ...SHIPPED_RBAC.slice(1)],
      });
      await node.plugStick(stick);
      const named = await until(
        'a status naming ClusterVersion',
        async () => {
          const conds = (api.get('nodebundlestatuses', 'node-a')?.status?.conditions ?? []) as {
            type: string;
            status: string;
            reason: string;
            message: string;
          }[];
          return conds.find((c) => /clusterversion/i.test(`${c.reason} ${c.message}`));
        },
        { timeoutMs: 300_000, stepMs: 250, detail: diag },
      );
      t.comment(`${named.type}=${named.status} ${named.reason}: ${named.message}`);
      const status = api.get('nodebundlestatuses', 'node-a')!.status;
      t.not(status.phase, 'Ready', 'the bundle is not loaded');
      t.equal(
        named.reason,
        'ClusterForbidden',
        'the reason says the node was refused, not that the version is unknown',
      );
      t.match(
        named.message,
        /offline-bundle:running-version-reader/,
        'the message names the missing rule',
      );
      t.ok(
        api.requests.some(
          (r) =>
            r.resource === 'clusterversions' &&
            r.name === 'version' &&
            r.user === 'system:node:node-a' &&
            r.status === 403,
        ),
        "the node's read of ClusterVersion version was refused (403)",
      );
    },
  );
}
