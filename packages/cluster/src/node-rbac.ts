/**
 * The RBAC fallback for clusters without ValidatingAdmissionPolicy (before Kubernetes 1.30 /
 * OpenShift 4.17), where deploy/rbac.yaml's policy cannot keep a node to its own object: every
 * node's NodeBundleStatus is created beforehand (empty), and each node's identity gets a
 * ClusterRole limited by resourceNames to its own object, with get and patch only (on the object
 * and its status), and get on ClusterVersion "version" (the running version); and the read-only
 * peer discovery rights (approvals, every node's status, Nodes). No create is granted, so no node
 * can make or touch another node's object, nor approve a bundle.
 * Apply it instead of deploy/rbac.yaml's writer ClusterRoleBinding; a node added later needs
 * its own objects (run the generator again).
 */
import {
  API_VERSION,
  APPROVAL_PLURAL,
  GROUP,
  isValidNodeName,
  KIND,
  PLURAL,
} from '@offline-bundle/status';
import { ClusterError } from '@offline-bundle/kube';

export type NodeIdentity = 'node' | 'serviceaccount';
export const AGENT_NAMESPACE = 'offline-bundle';
const PART_OF = { 'app.kubernetes.io/part-of': 'offline-bundle' };

export function nodeRbacObjects(
  nodes: readonly string[],
  identity: NodeIdentity = 'node',
): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const node of [...new Set(nodes)].sort()) {
    if (!isValidNodeName(node))
      throw new ClusterError(
        'INVALID_NODE_NAME',
        `node name ${JSON.stringify(node)} is not a DNS-1123 subdomain: check --nodes`,
      );
    const name = `offline-bundle:node-status-writer:${node}`;
    out.push({ apiVersion: API_VERSION, kind: KIND, metadata: { name: node, labels: PART_OF } });
    out.push({
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name, labels: PART_OF },
      rules: [
        { apiGroups: [GROUP], resources: [PLURAL], resourceNames: [node], verbs: ['get', 'patch'] },
        {
          apiGroups: [GROUP],
          resources: [`${PLURAL}/status`],
          resourceNames: [node],
          verbs: ['get', 'patch'],
        },
        // the running version (version.fromCluster), as rbac.yaml's offline-bundle:running-version-reader
        {
          apiGroups: ['config.openshift.io'],
          resources: ['clusterversions'],
          resourceNames: ['version'],
          verbs: ['get'],
        },
        // peer discovery (issue #22), as rbac.yaml's offline-bundle:peer-discovery: read-only
        { apiGroups: [GROUP], resources: [APPROVAL_PLURAL], verbs: ['get', 'list', 'watch'] },
        { apiGroups: [GROUP], resources: [PLURAL], verbs: ['list', 'watch'] },
        { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
      ],
    });
    out.push({
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name, labels: PART_OF },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
      subjects: [
        identity === 'node'
          ? { apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: `system:node:${node}` }
          : { kind: 'ServiceAccount', name: `bundle-agent-${node}`, namespace: AGENT_NAMESPACE },
      ],
    });
  }
  return out;
}
