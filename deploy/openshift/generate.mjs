#!/usr/bin/env node
// One source, two forms: the files an OpenShift node needs for bundle-agent, written as
// MachineConfigs (Ignition 3.4 inside, one per role; 3.2 with --plain-unit) and as the equivalent
// Butane files.
// Run `node generate.mjs --help` (or `bundle cluster manifests openshift --help` where shipped).
//
// Source (this directory and systemd/): the udev rule that mounts sticks, config.yaml.in, the
// trust key, tmpfiles.conf, the Quadlet unit bundle-agent.container (podman runs the agent
// image; CRI-O and podman share /var/lib/containers/storage), switch-guard.sh (its
// ExecStartPre: the rollback of an unconfirmed agent switch across reboots and crash loops), and
// the bootstrap that loads the agent image from a stick on a node that has none
// (bundle-agent-bootstrap.sh with its .service and .path units). No registry is needed.
// With --plain-unit (podman before 4.4: no Quadlet), the Quadlet unit is rendered as a plain
// systemd unit running `podman run`, from the same file: one list of mounts.
// Without --key the committed outputs carry example-factory.pub: regenerate with your key.
import { existsSync, readFileSync, statSync, writeFileSync, renameSync } from 'node:fs';
import { createPublicKey } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { gzipSync } from 'node:zlib';
// the version scripts/package.mjs tags the agent image with; esbuild inlines it into the shipped
// generator, which has no package.json beside it
import agentPackage from '../../agent/package.json' with { type: 'json' };

const HERE = path.dirname(fileURLToPath(import.meta.url));
// the repository's systemd/, or the shipped deploy tarball's (systemd/ beside openshift/)
const SYSTEMD_DIR = [
  path.resolve(HERE, '..', '..', 'systemd'),
  path.resolve(HERE, '..', 'systemd'),
].find((d) => existsSync(path.join(d, '99-bundle-agent-media.rules')));
export const IGNITION_VERSION = '3.4.0';
export const BUTANE_VERSION = '4.15.0';
// --plain-unit is for OpenShift before 4.14, whose MCO takes Ignition up to 3.2 (3.4 only from
// 4.14); Butane's openshift 4.8.0 translates to 3.2.0 and every 4.8-4.13 cluster takes it. The
// fields used (files: path, mode, overwrite, contents.source and gzip compression (3.1+); units: name, enabled, contents) are
// all in 3.2.
export const PLAIN_IGNITION_VERSION = '3.2.0';
export const PLAIN_BUTANE_VERSION = '4.8.0';
export const ROLES = ['master', 'worker'];
export const AGENT_REPOSITORY = 'localhost/offline-bundle/bundle-agent';
export const DEFAULT_IMAGE = `${AGENT_REPOSITORY}:${agentPackage.version}`;
const UNIT = 'bundle-agent';

export const HELP = `Usage: node deploy/openshift/generate.mjs [--key FACTORY.pub] [--image REF] [--plain-unit] [--out DIR]

Writes the MachineConfigs that install bundle-agent on OpenShift nodes (one per role) and the
same as Butane files: 99-master-bundle-agent.yaml, 99-worker-bundle-agent.yaml, and .bu.
No registry is needed: a node with no agent loads its image from the USB stick
(bundle-agent-VERSION-ARCH.oci.tar and .sig, which "bundle create --agent-image" writes beside
the bundle), checked against the key below.

Options:
  --key FILE     the factory's public key (PEM, from "bundle keygen"); default: the example key,
                 which no real bundle is signed with
  --image REF    the agent image the unit runs while no stick has brought one: an image already
                 in the nodes' storage, ${AGENT_REPOSITORY}:VERSION or
                 ${AGENT_REPOSITORY}@sha256:<64 hex> (default ${DEFAULT_IMAGE})
  --plain-unit   podman before 4.4 (OpenShift before 4.14, no Quadlet): a plain systemd unit
                 running podman run, with the same mounts, in Ignition 3.2 (Butane openshift
                 4.8.0), which those clusters accept; the agent does not upgrade itself (a newer
                 one: bundle-agent-bootstrap.sh --upgrade with its stick, README)
  --out DIR      where to write (default: this directory)
  -h, --help     this text

Then: oc apply -f 99-master-bundle-agent.yaml -f 99-worker-bundle-agent.yaml`;

class UsageError extends Error {}

/** REF as the unit may name it: the agent's repository, with a version tag or a sha256 digest. */
export function checkImage(ref) {
  const m = /^([a-z0-9][a-z0-9._/:-]*?)(?::([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(.*))?$/.exec(
    ref,
  );
  if (!m)
    throw new UsageError(
      `--image ${JSON.stringify(ref)}: not an image reference (REPOSITORY:TAG or REPOSITORY@sha256:<64 hex>)`,
    );
  const [, repo, tag, digest] = m;
  if (digest !== undefined && !/^sha256:[0-9a-f]{64}$/.test(digest))
    throw new UsageError(
      `--image ${ref}: ${JSON.stringify(digest)} is not a digest (sha256: and 64 lowercase hex digits)`,
    );
  if (tag === undefined && digest === undefined)
    throw new UsageError(
      `--image ${ref}: give a tag (:VERSION) or a digest (@sha256:...): podman never pulls here, so "latest" is not implied`,
    );
  if (repo !== AGENT_REPOSITORY)
    throw new UsageError(
      `--image ${ref}: the agent image is loaded as ${AGENT_REPOSITORY} (from the stick or a bundle); name that repository`,
    );
  return ref;
}

const PEM_PUBLIC_KEY =
  /^-----BEGIN PUBLIC KEY-----\r?\n[A-Za-z0-9+/=\r\n]+-----END PUBLIC KEY-----\s*$/;

/** The key file's text, once it is a public key openssl and the agent read. */
export function checkKey(file) {
  let text;
  try {
    if (!statSync(file).isFile()) throw new UsageError(`--key ${file}: not a regular file`);
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(`--key ${file}: ${err.code === 'ENOENT' ? 'no such file' : err.message}`);
  }
  try {
    const key = createPublicKey(text);
    const type =
      key.asymmetricKeyType === 'ec' ? key.asymmetricKeyDetails?.namedCurve : key.asymmetricKeyType;
    if (type !== 'prime256v1' && type !== 'ed25519')
      throw new UsageError(
        `--key ${file}: a ${type} key; bundles are signed with ECDSA P-256 or Ed25519 ("bundle keygen")`,
      );
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError(
      `--key ${file}: not a PEM public key (give FACTORY.pub from "bundle keygen", not the private .key)`,
    );
  }
  if (/PRIVATE KEY/.test(text))
    throw new UsageError(
      `--key ${file}: holds a private key: give the public one (.pub); the private key stays at the factory`,
    );
  // the node's openssl (pkey -pubin, dgst -verify) reads only a PEM SubjectPublicKeyInfo: a
  // certificate, which Node would take, would make every stick's signature fail there
  if (!PEM_PUBLIC_KEY.test(text))
    throw new UsageError(
      `--key ${file}: not one PEM public key ("-----BEGIN PUBLIC KEY-----" alone, as "bundle keygen" writes FACTORY.pub; for a certificate: openssl x509 -pubkey -noout -in CERT > factory.pub)`,
    );
  return text;
}

/** [section] → [key, value][] of a systemd/Quadlet INI file, in order (comments dropped). */
export function parseUnit(text) {
  const out = new Map();
  let sec;
  for (const line of text.split('\n')) {
    if (/^\s*(#|;|$)/.test(line)) continue;
    const s = /^\[(.+)\]$/.exec(line);
    if (s) {
      sec = [];
      out.set(s[1], sec);
      continue;
    }
    const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
    if (!kv || !sec) throw new Error(`not a unit file line: ${line}`);
    sec.push([kv[1], kv[2]]);
  }
  return out;
}

/** Volumes that exist only for the Quadlet self-upgrade (the unit file and its drop-ins). */
const quadletOnly = (volume) => volume.startsWith('/etc/containers/systemd/');
/** podman run's arguments for each [Container] key the Quadlet unit uses; any other key is refused. */
const CONTAINER_KEYS = {
  Image: () => [],
  ContainerName: (v) => [`--name=${v}`],
  Exec: () => [],
  Pull: (v) => [`--pull=${v}`],
  Network: (v) => [`--network=${v}`],
  PodmanArgs: (v) => v.split(/\s+/).filter(Boolean),
  SecurityLabelDisable: (v) => (v === 'true' ? ['--security-opt=label=disable'] : []),
  Volume: (v) => (quadletOnly(v) ? [] : ['-v', v]),
};

/**
 * The Quadlet unit as a plain systemd unit (podman before 4.4), as `podman generate systemd
 * --new` writes one: the image from BUNDLE_AGENT_IMAGE, which the bootstrap's drop-in sets.
 */
export function plainUnit(containerText) {
  const q = parseUnit(containerText);
  const c = q.get('Container') ?? [];
  const args = [];
  for (const [k, v] of c) {
    const f = CONTAINER_KEYS[k];
    if (!f)
      throw new Error(
        `bundle-agent.container: [Container] ${k}= has no plain-unit form in generate.mjs: add it to CONTAINER_KEYS`,
      );
    args.push(...f(v));
  }
  const image = c.find(([k]) => k === 'Image')?.[1];
  const exec = c.find(([k]) => k === 'Exec')?.[1] ?? '';
  const service = (q.get('Service') ?? []).filter(
    ([k, v]) => !(k === 'ExecStartPre' && v.includes('switch-guard.sh')),
  );
  const lines = [
    '# Generated by deploy/openshift/generate.mjs --plain-unit from bundle-agent.container (podman before 4.4,',
    '# no Quadlet): the same container, started as `podman generate systemd --new` starts one. The image is',
    '# BUNDLE_AGENT_IMAGE, which bundle-agent-bootstrap.sh sets by digest in bundle-agent.service.d/image.conf',
    '# (at the first stick; a newer agent: bundle-agent-bootstrap.sh --upgrade with its stick plugged in).',
    '[Unit]',
    // no podman-systemd.unit(5) before podman 4.4
    ...(q.get('Unit') ?? []).map(
      ([k, v]) =>
        `${k}=${k === 'Documentation' ? v.replace('man:podman-systemd.unit(5)', 'man:podman-generate-systemd(1) man:podman-run(1)') : v}`,
    ),
    '',
    '[Service]',
    `Environment=BUNDLE_AGENT_IMAGE=${image}`,
    'Environment=PODMAN_SYSTEMD_UNIT=%n',
    ...service.map(([k, v]) => `${k}=${v}`),
    'Type=notify',
    'NotifyAccess=all',
    'ExecStart=/usr/bin/podman run --cidfile=%t/%N.ctr-id --cgroups=no-conmon --rm --sdnotify=conmon -d --replace ' +
      `${args.map(quoteArg).join(' ')} \${BUNDLE_AGENT_IMAGE} ${exec}`.trim(),
    'ExecStop=/usr/bin/podman stop --ignore -t 20 --cidfile=%t/%N.ctr-id',
    'ExecStopPost=/usr/bin/podman rm -f --ignore --cidfile=%t/%N.ctr-id',
    '',
    '[Install]',
    ...(q.get('Install') ?? []).map(([k, v]) => `${k}=${v}`),
  ];
  return lines.join('\n') + '\n';
}

/** A word systemd's ExecStart splits as one (our values have no quotes or spaces but are checked). */
function quoteArg(a) {
  if (!/^[A-Za-z0-9_./:=,@%+-]+$/.test(a))
    throw new Error(`bundle-agent.container: ${JSON.stringify(a)} would need quoting in ExecStart`);
  return a;
}

/** The node's files: path, mode, contents; and systemd units: name, contents (one list for both forms). */
export function nodeFiles({
  image = DEFAULT_IMAGE,
  key = path.join(HERE, 'example-factory.pub'),
  plain = false,
} = {}) {
  const read = (p) => readFileSync(p, 'utf8');
  const container = read(path.join(HERE, 'bundle-agent.container')).replaceAll('@IMAGE@', image);
  let config = read(path.join(HERE, 'config.yaml.in'));
  if (plain) {
    // no Quadlet drop-in to switch the image with: the agent does not upgrade itself
    if (!/^ {2}mode: quadlet$/m.test(config))
      throw new Error('config.yaml.in: no "  mode: quadlet" line under selfUpgrade');
    config = config.replace(
      /^ {2}mode: quadlet$/m,
      '  mode: "off"                     # plain unit (podman before 4.4): a new agent comes by MachineConfig or stick',
    );
  }
  const files = [
    {
      path: '/etc/udev/rules.d/99-bundle-agent-media.rules',
      mode: 0o644,
      contents: read(path.join(SYSTEMD_DIR, '99-bundle-agent-media.rules')),
    },
    { path: '/etc/bundle-agent/config.yaml', mode: 0o644, contents: config },
    { path: '/etc/bundle-agent/keys/factory.pub', mode: 0o644, contents: checkKey(key) },
    {
      path: '/etc/tmpfiles.d/bundle-agent.conf',
      mode: 0o644,
      contents: read(path.join(HERE, 'tmpfiles.conf')),
    },
    {
      path: '/etc/bundle-agent/bundle-agent-bootstrap.sh',
      mode: 0o755,
      contents: read(path.join(HERE, 'bundle-agent-bootstrap.sh')),
    },
    ...(plain
      ? []
      : [
          {
            path: '/etc/bundle-agent/switch-guard.sh',
            mode: 0o755,
            contents: read(path.join(HERE, 'switch-guard.sh')),
          },
          { path: `/etc/containers/systemd/${UNIT}.container`, mode: 0o644, contents: container },
        ]),
  ];
  const units = [
    {
      name: 'bundle-agent-bootstrap.service',
      enabled: true,
      contents: read(path.join(HERE, 'bundle-agent-bootstrap.service')),
    },
    {
      name: 'bundle-agent-bootstrap.path',
      enabled: true,
      contents: read(path.join(HERE, 'bundle-agent-bootstrap.path')),
    },
    // a Quadlet unit is enabled by its [Install] section through the generator; a plain one here
    ...(plain ? [{ name: `${UNIT}.service`, enabled: true, contents: plainUnit(container) }] : []),
  ];
  return { files, units, plain };
}

const name = (role) => `99-${role}-bundle-agent`;
const labels = (role) => ({ 'machineconfiguration.openshift.io/role': role });

/**
 * A file's Ignition contents: a data URL, gzip-compressed where that is shorter (as Butane
 * does), since the MachineConfig lives in etcd and every node renders it. Ignition has
 * decompressed gzip since spec 3.1, so both the 3.2 and the 3.4 output may use it.
 */
function ignitionContents(text) {
  const plain = Buffer.from(text);
  const packed = gzipSync(plain, { level: 9 });
  return packed.length < plain.length
    ? { compression: 'gzip', source: `data:;base64,${packed.toString('base64')}` }
    : { source: `data:text/plain;charset=utf-8;base64,${plain.toString('base64')}` };
}

/** MachineConfig with an Ignition config inside (files as data URLs, units inline). */
export function machineConfig(role, { files, units, plain = false }) {
  return {
    apiVersion: 'machineconfiguration.openshift.io/v1',
    kind: 'MachineConfig',
    metadata: { name: name(role), labels: labels(role) },
    spec: {
      config: {
        ignition: { version: plain ? PLAIN_IGNITION_VERSION : IGNITION_VERSION },
        storage: {
          files: files.map((f) => ({
            path: f.path,
            mode: f.mode,
            overwrite: true,
            contents: ignitionContents(f.contents),
          })),
        },
        systemd: {
          units: units.map((u) => ({ name: u.name, enabled: u.enabled, contents: u.contents })),
        },
      },
    },
  };
}

/** The same as Butane (openshift variant), which `butane` translates into the MachineConfig above. */
export function butane(role, { files, units, plain = false }) {
  return {
    variant: 'openshift',
    version: plain ? PLAIN_BUTANE_VERSION : BUTANE_VERSION,
    metadata: { name: name(role), labels: labels(role) },
    storage: {
      files: files.map((f) => ({
        path: f.path,
        mode: f.mode,
        overwrite: true,
        contents: { inline: f.contents },
      })),
    },
    systemd: {
      units: units.map((u) => ({ name: u.name, enabled: u.enabled, contents: u.contents })),
    },
  };
}

function writeAtomic(file, text) {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

export async function main(argv = process.argv.slice(2), out = process.stdout) {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        image: { type: 'string' },
        key: { type: 'string' },
        out: { type: 'string', default: HERE },
        'plain-unit': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    throw new UsageError(`${err.message} (see --help)`);
  }
  if (values.help) {
    out.write(HELP + '\n');
    return;
  }
  if (values.image !== undefined) checkImage(values.image);
  if (!existsSync(values.out) || !statSync(values.out).isDirectory())
    throw new UsageError(`--out ${values.out}: not a directory`);
  const { stringify } = await import('yaml');
  const node = nodeFiles({
    ...(values.image ? { image: values.image } : {}),
    ...(values.key ? { key: values.key } : {}),
    plain: !!values['plain-unit'],
  });
  const head = `# Generated by deploy/openshift/generate.mjs: edit the sources and run it again.\n`;
  const written = [];
  for (const role of ROLES) {
    // Modes as octal literals in YAML 1.1 would be ambiguous: keep them decimal, as Ignition has them.
    const yamlFile = path.join(values.out, `${name(role)}.yaml`);
    const buFile = path.join(values.out, `${name(role)}.bu`);
    writeAtomic(yamlFile, head + stringify(machineConfig(role, node), { lineWidth: 0 }));
    writeAtomic(
      buFile,
      head + stringify(butane(role, node), { lineWidth: 0, blockQuote: 'literal' }),
    );
    written.push(yamlFile, buFile);
  }
  const form = values['plain-unit'] ? 'plain podman unit' : 'Quadlet unit';
  out.write(
    `wrote ${written.join(', ')} (${form}, key ${values.key ?? 'example-factory.pub (an example: use --key)'}, image ${values.image ?? DEFAULT_IMAGE} until a stick brings one)\n`,
  );
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    process.stderr.write(
      `generate.mjs: ${e instanceof UsageError ? e.message : (e.message ?? e)}\n`,
    );
    process.exitCode = e instanceof UsageError ? 2 : 1;
  });
}
