import { OciError } from '@offline-bundle/oci';

/**
 * Asks for a secret on the terminal without echoing it (as skopeo asks the password of
 * `--creds USER`): the line typed on stdin, which must be a terminal. Ctrl-C stops the run
 * (exit 130), as it would outside the prompt.
 */
export async function askSecret(question: string, flag: string): Promise<string> {
  const input = process.stdin;
  if (!input.isTTY)
    throw new OciError(
      'INVALID_CONFIG',
      `${flag} without a password needs a terminal to ask it on: give ${flag} USER:PASSWORD, or log in with "podman login"`,
    );
  // echo goes off before the question shows: a fast typist (or a script) answering the
  // moment the prompt appears must not see the password echoed
  input.setRawMode(true);
  input.resume();
  process.stderr.write(question);
  let secret = '';
  try {
    return await new Promise<string>((resolve, reject) => {
      input.on('data', (chunk: Buffer) => {
        for (const ch of chunk.toString('utf8')) {
          if (ch === '\r' || ch === '\n' || ch === '\u0004') return resolve(secret);
          if (ch === '\u0003')
            return reject(
              Object.assign(new Error('interrupted at the password prompt'), {
                code: 'INTERRUPTED',
                exitCode: 130,
              }),
            );
          if (ch === '\u007f' || ch === '\b') secret = secret.slice(0, -1);
          else secret += ch;
        }
      });
    });
  } finally {
    input.removeAllListeners('data');
    input.setRawMode(false);
    input.pause();
    process.stderr.write('\n');
  }
}
