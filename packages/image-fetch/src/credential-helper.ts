import { execFile } from 'node:child_process';
import type { Credentials } from './credentials.js';
import { firstLine } from '@offline-bundle/host';
import { OciError } from '@offline-bundle/oci';

/** A helper may ask a keychain or a hardware token; longer than this, and it is stuck. */
const CREDENTIAL_HELPER_TIMEOUT_MS = 30_000;
/** A helper's answer is one small JSON object; more output than this is not one. */
const MAX_CREDENTIAL_HELPER_OUTPUT = 64 * 1024;

export interface HelperOptions {
  /** Environment of the helper (its PATH finds it). */
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * Asks `docker-credential-NAME get` for the credentials of `serverUrl` (the docker
 * credential-helper protocol: the server on stdin, {"Username","Secret"} on stdout; the user
 * "<token>" means Secret is an identity token). Undefined when the helper has none.
 */
export function helperCredentials(
  name: string,
  serverUrl: string,
  source: string,
  opts: HelperOptions = {},
): Promise<Credentials | undefined> {
  const program = `docker-credential-${name}`;
  if (!NAME.test(name))
    return Promise.reject(
      new OciError('INVALID_CONFIG', `${source}: "${name}" is not a credential helper name`),
    );
  return new Promise((resolve, reject) => {
    const fail = (why: string, cause?: unknown) =>
      reject(
        new OciError('CREDENTIAL_HELPER_ERROR', `${program} (from ${source}) ${why}`, { cause }),
      );
    const child = execFile(
      program,
      ['get'],
      {
        env: opts.env ?? process.env,
        timeout: opts.timeoutMs ?? CREDENTIAL_HELPER_TIMEOUT_MS,
        killSignal: 'SIGKILL',
        maxBuffer: MAX_CREDENTIAL_HELPER_OUTPUT,
        encoding: 'utf8',
      },
      (err, stdout, stderr) => {
        if (err) {
          const e = err as NodeJS.ErrnoException & { killed?: boolean; code?: unknown };
          if (e.code === 'ENOENT')
            return fail('is not on PATH: install it or remove it from that file', err);
          if (e.code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER')
            return fail(`wrote more than ${MAX_CREDENTIAL_HELPER_OUTPUT} bytes`, err);
          if (e.killed)
            return fail(
              `did not answer within ${Math.round((opts.timeoutMs ?? CREDENTIAL_HELPER_TIMEOUT_MS) / 1000)} s`,
              err,
            );
          const said = `${stdout}\n${stderr}`;
          // the protocol's answer for "not logged in" (docker-credential-helpers' ErrCredentialsNotFound)
          if (/credentials not found/i.test(said)) return resolve(undefined);
          return fail(
            `failed for ${serverUrl}: ${firstLine(stdout.trim() || stderr).slice(0, 200) || `exit ${String(e.code)}`}`,
            err,
          );
        }
        let doc: { Username?: unknown; Secret?: unknown };
        try {
          doc = JSON.parse(stdout) as typeof doc;
        } catch (cause) {
          return fail(`answered something that is not JSON for ${serverUrl}`, cause);
        }
        if (typeof doc?.Username !== 'string' || typeof doc.Secret !== 'string')
          return fail(`answered without Username and Secret for ${serverUrl}`);
        resolve(
          doc.Username === '<token>'
            ? { identityToken: doc.Secret }
            : { username: doc.Username, password: doc.Secret },
        );
      },
    );
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(serverUrl);
  });
}
