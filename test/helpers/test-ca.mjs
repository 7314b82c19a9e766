// A throw-away certificate authority made with the openssl CLI: a CA, a server certificate
// for the given names (IP addresses and DNS names), and a client certificate, all P-256,
// valid for two days. For TLS registries (startRegistry({ tls })) and certs.d directories.
import { spawn } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';

/** @param {string[]} args @param {string} cwd */
function openssl(args, cwd) {
  return new Promise((resolve, reject) => {
    const child = spawn('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => {
      err += d;
    });
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0
        ? resolve(undefined)
        : reject(new Error(`openssl ${args.join(' ')} failed (${code}): ${err}`)),
    );
  });
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/**
 * @typedef {object} TestCa  PEM file paths in `dir`
 * @property {string} caCert
 * @property {string} caKey
 * @property {string} serverCert
 * @property {string} serverKey
 * @property {string} clientCert
 * @property {string} clientKey
 */

/**
 * @param {string} dir  an existing directory for the files
 * @param {{ names?: string[] }} [opts] names: the server's names ('127.0.0.1', 'registry.test')
 * @returns {Promise<TestCa>}
 */
export async function makeTestCa(dir, opts = {}) {
  const names = opts.names ?? ['127.0.0.1'];
  const san = names.map((n) => (/^[\d.]+$|:/.test(n) ? `IP:${n}` : `DNS:${n}`)).join(',');
  await openssl(
    [
      'req',
      '-x509',
      ...EC,
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
      '-days',
      '2',
      '-subj',
      '/CN=offline-bundle test CA',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  for (const [who, ext] of [
    ['server', `subjectAltName=${san}\nextendedKeyUsage=serverAuth\n`],
    ['client', 'extendedKeyUsage=clientAuth\n'],
  ]) {
    await writeFile(path.join(dir, `${who}.ext`), ext);
    await openssl(
      ['req', ...EC, '-keyout', `${who}.key`, '-out', `${who}.csr`, '-subj', `/CN=${who}`],
      dir,
    );
    await openssl(
      [
        'x509',
        '-req',
        '-in',
        `${who}.csr`,
        '-CA',
        'ca.crt',
        '-CAkey',
        'ca.key',
        '-CAcreateserial',
        '-out',
        `${who}.crt`,
        '-days',
        '2',
        '-extfile',
        `${who}.ext`,
      ],
      dir,
    );
  }
  const p = (/** @type {string} */ f) => path.join(dir, f);
  return {
    caCert: p('ca.crt'),
    caKey: p('ca.key'),
    serverCert: p('server.crt'),
    serverKey: p('server.key'),
    clientCert: p('client.crt'),
    clientKey: p('client.key'),
  };
}

/**
 * One more client certificate from a CA made by makeTestCa, with the subject a Kubernetes API
 * server reads as the user (CN) and the groups (one O each), as the kubelet's is made.
 * @param {TestCa} ca
 * @param {string} dir  an existing directory for the files (`${file}.crt`, `${file}.key`)
 * @param {string} file  base name of the files
 * @param {{ cn: string, o?: string[] }} subject
 * @returns {Promise<{ cert: string, key: string }>}
 */
export async function issueClientCert(ca, dir, file, subject) {
  const esc = (/** @type {string} */ s) => s.replace(/[/\\]/g, (c) => `\\${c}`);
  const subj = [...(subject.o ?? []).map((o) => `/O=${esc(o)}`), `/CN=${esc(subject.cn)}`].join('');
  await writeFile(path.join(dir, `${file}.ext`), 'extendedKeyUsage=clientAuth\n');
  await openssl(
    ['req', ...EC, '-keyout', `${file}.key`, '-out', `${file}.csr`, '-subj', subj],
    dir,
  );
  await openssl(
    [
      'x509',
      '-req',
      '-in',
      `${file}.csr`,
      '-CA',
      ca.caCert,
      '-CAkey',
      ca.caKey,
      '-CAcreateserial',
      '-out',
      `${file}.crt`,
      '-days',
      '2',
      '-extfile',
      `${file}.ext`,
    ],
    dir,
  );
  return { cert: path.join(dir, `${file}.crt`), key: path.join(dir, `${file}.key`) };
}
