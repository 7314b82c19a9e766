#!/usr/bin/env node
// The peer network's keys: a CA and ONE node certificate (serverAuth and clientAuth) that every
// node of the cluster holds, shipped as root-only files in a MachineConfig per role. Why one
// shared certificate and not one per node: see SECURITY.md "Peer transfer". The CA's key is not
// shipped: keep it offline to issue a new node certificate, or throw it away and run this again.
// Run `node peer-ca.mjs --help`.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

/** Where the agent reads them (config peers.ca, peers.cert, peers.key: these are its defaults, under its root). */
export const PEER_DIR = '/etc/bundle-agent/peers';
export const PEER_FILES = {
  ca: `${PEER_DIR}/ca.crt`,
  cert: `${PEER_DIR}/node.crt`,
  key: `${PEER_DIR}/node.key`,
};
const ROLES = ['master', 'worker'];
const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export const HELP = `Usage: node deploy/openshift/peer-ca.mjs --out DIR [--days N]

Makes the keys the nodes' agents use to send bundles to each other (mutual TLS on the peer
port): a peer CA and one node certificate with its key, and a MachineConfig per role that puts
them on every node as root-only files under ${PEER_DIR}/.

Writes in DIR: peer-ca.crt, peer-ca.key (keep it offline or delete it: it is not shipped),
node.crt, node.key, 99-master-bundle-agent-peers.yaml, 99-worker-bundle-agent-peers.yaml.

Options:
  --out DIR   where to write (created; existing files of these names are replaced)
  --days N    validity of the CA and the node certificate (default 825); make new ones before
              then and apply the MachineConfigs again
  -h, --help  this text

Then: oc apply -f DIR/99-master-bundle-agent-peers.yaml -f DIR/99-worker-bundle-agent-peers.yaml
The MachineConfigs hold a private key: keep DIR as secret as the cluster's pull secret.`;

function openssl(args, cwd) {
  const r = spawnSync('openssl', args, {
    cwd,
    stdio: ['ignore', 'ignore', 'pipe'],
    encoding: 'utf8',
  });
  if (r.error) throw new Error(`cannot run openssl (${r.error.message}): install it`);
  if (r.status !== 0)
    throw new Error(`openssl ${args[0]} failed: ${r.stderr.trim().split('\n')[0]}`);
}

/** The CA and the shared node certificate in `dir` (PEM files). */
export function makePeerCa(dir, { days = 825 } = {}) {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const tmp = path.join(dir, '.peer-ca-work');
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { mode: 0o700 });
  try {
    openssl(
      [
        'req',
        '-x509',
        ...EC,
        '-keyout',
        'peer-ca.key',
        '-out',
        'peer-ca.crt',
        '-days',
        String(days),
        '-subj',
        '/CN=bundle-agent peer CA',
        '-addext',
        'basicConstraints=critical,CA:TRUE,pathlen:0',
        '-addext',
        'keyUsage=critical,keyCertSign,cRLSign',
      ],
      tmp,
    );
    writeFileSync(
      path.join(tmp, 'node.ext'),
      'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n',
    );
    openssl(
      ['req', ...EC, '-keyout', 'node.key', '-out', 'node.csr', '-subj', '/CN=bundle-agent peer'],
      tmp,
    );
    openssl(
      [
        'x509',
        '-req',
        '-in',
        'node.csr',
        '-CA',
        'peer-ca.crt',
        '-CAkey',
        'peer-ca.key',
        '-CAcreateserial',
        '-out',
        'node.crt',
        '-days',
        String(days),
        '-extfile',
        'node.ext',
      ],
      tmp,
    );
    for (const f of ['peer-ca.crt', 'peer-ca.key', 'node.crt', 'node.key'])
      renameSync(path.join(tmp, f), path.join(dir, f));
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const p = (f) => path.join(dir, f);
  return { ca: p('peer-ca.crt'), caKey: p('peer-ca.key'), cert: p('node.crt'), key: p('node.key') };
}

const dataUrl = (text) => `data:;base64,${Buffer.from(text).toString('base64')}`;

/** A MachineConfig (JSON, which oc reads as YAML) placing the three files on `role`'s nodes. */
export function peerMachineConfig(role, files) {
  const file = (target, text, mode) => ({
    path: target,
    mode,
    overwrite: true,
    contents: { source: dataUrl(text) },
  });
  return {
    apiVersion: 'machineconfiguration.openshift.io/v1',
    kind: 'MachineConfig',
    metadata: {
      name: `99-${role}-bundle-agent-peers`,
      labels: { 'machineconfiguration.openshift.io/role': role },
    },
    spec: {
      config: {
        ignition: { version: '3.4.0' },
        storage: {
          files: [
            file(PEER_FILES.ca, readFileSync(files.ca, 'utf8'), 0o644),
            file(PEER_FILES.cert, readFileSync(files.cert, 'utf8'), 0o644),
            // root only: whoever reads it can fetch every bundle the cluster holds
            file(PEER_FILES.key, readFileSync(files.key, 'utf8'), 0o600),
          ],
        },
      },
    },
  };
}

function main() {
  const { values } = parseArgs({
    options: {
      out: { type: 'string' },
      days: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return void console.log(HELP);
  if (!values.out) {
    console.error(`peer-ca.mjs: --out DIR is required\n\n${HELP}`);
    process.exit(2);
  }
  const days = values.days === undefined ? 825 : Number(values.days);
  if (!Number.isInteger(days) || days < 1) {
    console.error(`peer-ca.mjs: --days ${values.days}: give a whole number of days of at least 1`);
    process.exit(2);
  }
  const files = makePeerCa(values.out, { days });
  for (const role of ROLES) {
    writeFileSync(
      path.join(values.out, `99-${role}-bundle-agent-peers.yaml`),
      JSON.stringify(peerMachineConfig(role, files), null, 2) + '\n',
      { mode: 0o600 },
    );
  }
  console.log(
    `wrote the peer CA and node certificate in ${values.out}; apply: oc apply -f ${path.join(values.out, '99-master-bundle-agent-peers.yaml')} -f ${path.join(values.out, '99-worker-bundle-agent-peers.yaml')}`,
  );
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    main();
  } catch (err) {
    console.error(`peer-ca.mjs: ${err.message}`);
    process.exit(1);
  }
}
