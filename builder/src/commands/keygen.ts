import { chmod, open } from 'node:fs/promises';
import { Command, Option } from 'commander';
import { writeFileAtomic } from '@offline-bundle/oci';
import { FormatError, PASSPHRASE_ENV, generateKeyPair, loadPublicKey, readPassphrase } from '@offline-bundle/format';

/** bundle keygen: the factory's signing key pair. */
export function addKeygenCommand(program: Command): void {
  program.command('keygen')
    .description('Create a signing key pair: PREFIX.key (private, mode 0600; keep it at the factory) and PREFIX.pub (give it to every cluster).')
    .requiredOption('--out <prefix>', 'path prefix for the two files')
    .addOption(new Option('--type <type>', 'key type').choices(['ecdsa-p256', 'ed25519']).default('ecdsa-p256'))
    .option('--force', 'overwrite existing files')
    .option('--passphrase-file <file>', `encrypt the private key with the passphrase on this file's first line (or set ${PASSPHRASE_ENV})`)
    .option('--json', 'print the result as JSON')
    .action(async (o: { out: string; type: 'ecdsa-p256' | 'ed25519'; force?: boolean; passphraseFile?: string; json?: boolean }) => {
      const { privatePem, publicPem } = generateKeyPair(o.type, await readPassphrase(o.passphraseFile));
      const keyPath = `${o.out}.key`;
      const pubPath = `${o.out}.pub`;
      const fh = await open(keyPath, o.force ? 'w' : 'wx', 0o600).catch((err: NodeJS.ErrnoException) => {
        throw new FormatError('KEY_ERROR', err.code === 'EEXIST' ? `${keyPath} exists: pass --force to overwrite it` : `cannot write ${keyPath}: ${err.message}`);
      });
      await fh.writeFile(privatePem);
      await fh.close();
      await chmod(keyPath, 0o600);
      await writeFileAtomic(pubPath, publicPem);
      const fp = (await loadPublicKey(pubPath)).fingerprint;
      if (o.json) process.stdout.write(JSON.stringify({ privateKey: keyPath, publicKey: pubPath, type: o.type, fingerprint: fp }) + '\n');
      else process.stdout.write(`wrote ${keyPath} (private, 0600) and ${pubPath}\nfingerprint ${fp}\n`);
    });
}
