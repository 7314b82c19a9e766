import { open } from 'node:fs/promises';
import { Command, Option } from 'commander';
import { writeFileAtomic } from '@offline-bundle/host';
import {
  FormatError,
  PASSPHRASE_ENV,
  generateKeyPair,
  loadPublicKey,
  readPassphrase,
} from '@offline-bundle/format';

interface KeygenFlags {
  out: string;
  type: 'ecdsa-p256' | 'ed25519';
  force?: boolean;
  passphraseFile?: string;
  json?: boolean;
}

/**
 * The private key, 0600 from its creation on. Never through what is at its name: a link planted
 * there (the directory shared, or someone else's) would carry the key, and a chmod after it, to
 * a file of its maker's choosing. --force writes a temp file beside it and renames it over.
 */
async function writePrivateKey(keyPath: string, pem: string, force: boolean): Promise<void> {
  const fail = (err: NodeJS.ErrnoException) => {
    throw new FormatError(
      'KEY_ERROR',
      err.code === 'EEXIST'
        ? `${keyPath} exists: pass --force to overwrite it`
        : `cannot write ${keyPath}: ${err.message}`,
    );
  };
  if (force) return writeFileAtomic(keyPath, pem, 0o600).catch(fail);
  // O_EXCL: a link at the name is refused like any other entry
  const fh = await open(keyPath, 'wx', 0o600).catch(fail);
  try {
    await fh.writeFile(pem);
  } finally {
    await fh.close();
  }
}

/** `bundle keygen --out PREFIX`: the factory's signing key pair. */
export function addKeygenCommand(program: Command): void {
  program
    .command('keygen')
    .description(
      'Create a signing key pair: PREFIX.key (private, mode 0600; keep it at the factory) and PREFIX.pub (give it to every cluster).',
    )
    .requiredOption('--out <prefix>', 'path prefix for the two files')
    .addOption(
      new Option('--type <type>', 'key type')
        .choices(['ecdsa-p256', 'ed25519'])
        .default('ecdsa-p256'),
    )
    .option('--force', 'overwrite existing files')
    .option(
      '--passphrase-file <file>',
      `encrypt the private key with the passphrase on this file's first line (or set ${PASSPHRASE_ENV})`,
    )
    .option('--json', 'print the result as JSON')
    .action(keygen);
}

async function keygen(o: KeygenFlags): Promise<void> {
  const { privatePem, publicPem } = generateKeyPair(o.type, await readPassphrase(o.passphraseFile));
  const keyPath = `${o.out}.key`;
  const pubPath = `${o.out}.pub`;
  await writePrivateKey(keyPath, privatePem, o.force === true);
  await writeFileAtomic(pubPath, publicPem);
  const fp = (await loadPublicKey(pubPath)).fingerprint;
  if (o.json)
    process.stdout.write(
      JSON.stringify({
        privateKey: keyPath,
        publicKey: pubPath,
        type: o.type,
        fingerprint: fp,
      }) + '\n',
    );
  else process.stdout.write(`wrote ${keyPath} (private, 0600) and ${pubPath}\nfingerprint ${fp}\n`);
}
