#!/usr/bin/env node
// "kubelet" stand-in of the offline cluster model (issue 38, item 5): starts every container of
// every pod of a recorded pod list through the CRI with the container's imagePullPolicy, as the
// kubelet's image manager decides: IfNotPresent (the default for a digest or a tag other than
// :latest) pulls only when ImageStatus finds nothing; Always pulls every time.
// Used in-process by test/cluster/offline-model-standins.ts, and as a booted node's
// kubelet.service (test/node/offline-model-booted.test.ts):
//
//   node test/helpers/kubelet-standin.mjs --socket /var/run/crio/crio.sock --pods PODS.json --out STARTS.json
//
// The CLI writes {startedAt, registriesDropIns, starts} to --out (temp file + rename) and exits 1
// when a pod did not start, so its unit fails as a kubelet whose pods cannot start is unhealthy.
import { readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

/** A failed pull's message, bounded (a CRI error can carry a whole registries view). */
const ERROR_CHARS = 300;

/**
 * @param {{ imageStatus(ref: string): Promise<unknown>, pullImage(ref: string): Promise<string> }} cri
 * @param {any[]} pods
 * @returns {Promise<{ pod: string, image: string, policy: string, ok: boolean, action: 'present' | 'pulled' | 'failed', error?: string }[]>}
 */
export async function startPods(cri, pods) {
  const out = [];
  for (const p of pods) {
    for (const c of p.spec.containers) {
      const policy = c.imagePullPolicy ?? 'IfNotPresent';
      const pod = `${p.metadata.namespace}/${p.metadata.name}`;
      if (policy !== 'Always' && (await cri.imageStatus(c.image))) {
        out.push({ pod, image: c.image, policy, ok: true, action: 'present' });
        continue;
      }
      try {
        await cri.pullImage(c.image);
        out.push({ pod, image: c.image, policy, ok: true, action: 'pulled' });
      } catch (err) {
        out.push({
          pod,
          image: c.image,
          policy,
          ok: false,
          action: 'failed',
          error: String(err?.message ?? err).slice(0, ERROR_CHARS),
        });
      }
    }
  }
  return out;
}

async function main() {
  const { values: o } = parseArgs({
    options: {
      socket: { type: 'string' },
      pods: { type: 'string' },
      out: { type: 'string' },
      'registries-conf-dir': { type: 'string', default: '/etc/containers/registries.conf.d' },
    },
  });
  if (!o.socket || !o.pods || !o.out)
    throw new Error('give --socket CRI_SOCKET --pods PODS.json --out STARTS.json');
  const startedAt = new Date().toISOString();
  // what the runtime's mirrors could be when the kubelet started: the unit ordering's evidence
  const registriesDropIns = (() => {
    try {
      return readdirSync(o['registries-conf-dir']).sort();
    } catch {
      return [];
    }
  })();
  const { CriImageClient } = await import('../../packages/runtime/dist/index.js');
  const cri = new CriImageClient(o.socket, { callTimeoutMs: 10_000 });
  let starts;
  try {
    starts = await startPods(cri, JSON.parse(readFileSync(o.pods, 'utf8')));
  } finally {
    cri.close();
  }
  writeFileSync(`${o.out}.tmp`, `${JSON.stringify({ startedAt, registriesDropIns, starts })}\n`);
  renameSync(`${o.out}.tmp`, o.out);
  const failed = starts.filter((s) => !s.ok);
  for (const s of starts)
    console.log(
      `${s.ok ? 'started' : 'FAILED '} ${s.pod} (${s.policy}): ${s.action} ${s.image}${s.error ? `: ${s.error}` : ''}`,
    );
  process.exitCode = failed.length ? 1 : 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((err) => {
    console.error(`kubelet stand-in: ${err?.message ?? err}`);
    process.exit(2);
  });
}
