// The tests' one way to run a command to its end and keep what it printed.
import { spawn, type SpawnOptions } from 'node:child_process';

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `command args` with stdin closed and resolves when it has exited, with its exit code
 * (null when killed, as by `timeout`) and output; rejects only when it cannot be started.
 */
export function runCaptured(
  command: string,
  args: string[],
  options: Omit<SpawnOptions, 'stdio'> = {},
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d;
    });
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
