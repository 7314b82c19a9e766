// Standard tools over a bundle file: what FORMAT.md promises a verified bundle always allows.
import { spawn } from 'node:child_process';

/** `zstd -dc FILE | tar -x -C DIR`; rejects with both tools' stderr when either fails. */
export function zstdTarExtract(file: string, dir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const z = spawn('zstd', ['-q', '-dc', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    const x = spawn('tar', ['-x', '-C', dir], { stdio: ['pipe', 'ignore', 'pipe'] });
    z.stdout!.pipe(x.stdin!);
    let err = '';
    z.stderr!.on('data', (c) => (err += c));
    x.stderr!.on('data', (c) => (err += c));
    const codes: (number | null)[] = [];
    const done = (code: number | null) => {
      codes.push(code);
      if (codes.length < 2) return;
      if (codes.every((c) => c === 0)) resolve();
      else
        reject(new Error(`zstd -dc ${file} | tar -x failed (${codes.join(', ')}): ${err.trim()}`));
    };
    z.on('error', reject).on('close', done);
    x.on('error', reject).on('close', done);
  });
}
