// `bundle completion bash`: a completion script bash loads, completing subcommands and the
// chosen subcommand's options (the builder tarball ships it under share/bash-completion).
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';

const BUNDLE = join(new URL('../../', import.meta.url).pathname, 'builder/bin/bundle.js');

t.test('bundle completion bash', async (t) => {
  const script = execFileSync(process.execPath, [BUNDLE, 'completion', 'bash'], { encoding: 'utf8' });
  const complete = (words: string[]) => execFileSync('bash', ['-c', `${script}\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _bundle_complete; printf '%s\\n' "\${COMPREPLY[@]}"`], { encoding: 'utf8' }).trim().split('\n');
  t.same(complete(['bundle', 'cr']), ['create'], 'subcommands');
  t.ok(complete(['bundle', '']).includes('verify'), 'every subcommand offered');
  t.notOk(complete(['bundle', '']).includes('man'), 'not the hidden man command (packaging writes bundle(1) with it)');
  t.same(complete(['bundle', 'create', '--ke']), ['--key'], "the subcommand's options");
  t.ok(complete(['bundle', 'verify', '--']).includes('--help'));
  const zsh = spawnSync(process.execPath, [BUNDLE, 'completion', 'zsh'], { encoding: 'utf8' });
  t.equal(zsh.status, 1, 'an unknown shell is an error');
});
