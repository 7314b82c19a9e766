// `bundle completion SHELL` and `bundle-agent completion SHELL`: scripts bash, zsh and fish load,
// written from each CLI's own command tree, so nested subcommands (bundle cluster status,
// bundle-agent releases forget) and each command's options complete (the tarballs ship them
// under share/). bash and fish are driven for real (fish: `complete -C`); zsh runs the
// generated function with compsys's _describe and _files as stand-ins that print what they were
// given, and once for real: an interactive zsh on a pty (zsh/zpty) with compinit loading the
// scripts from $fpath, as an installed _bundle is, and Tab pressed (twice per program: a file
// compinit autoloads must still complete on its second use).
import t from 'tap';
import { execFileSync, spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tmpdir } from '../helpers/tmp.mjs';

const ROOT = new URL('../../', import.meta.url).pathname;
const BIN = {
  bundle: join(ROOT, 'builder/bin/bundle.js'),
  'bundle-agent': join(ROOT, 'agent/bin/bundle-agent.js'),
};
type Program = keyof typeof BIN;
// each script made once: the CLI's start is most of a completion's time, and the suite's
const scripts = new Map<string, string>();
const script = (program: Program, shell: string) => {
  const key = `${program} ${shell}`;
  if (!scripts.has(key))
    scripts.set(
      key,
      execFileSync(process.execPath, [BIN[program], 'completion', shell], { encoding: 'utf8' }),
    );
  return scripts.get(key)!;
};
const fn = (program: Program) => `_${program.replace(/-/g, '_')}`;
const q = (w: string) => `'${w}'`;

function bash(program: Program, words: string[], cwd = ROOT): string[] {
  return execFileSync(
    'bash',
    [
      '-c',
      `${script(program, 'bash')}\nCOMP_WORDS=(${words.map(q).join(' ')}); COMP_CWORD=${words.length - 1}; ${fn(program)}_complete; printf '%s\\n' "\${COMPREPLY[@]}"`,
    ],
    { encoding: 'utf8', cwd },
  )
    .trim()
    .split('\n');
}

function zsh(program: Program, words: string[]): string[] {
  const standIns = `compdef() { :; }
_describe() { local i; for i in "\${(@P)4}"; do print -r -- "\${\${i%%:[^\\\\]*}//\\\\:/:}"; done; }
_files() { print -- '<files>'; }`;
  const run = `${standIns}\n${script(program, 'zsh')}\nwords=(${words.map(q).join(' ')}); CURRENT=${words.length}; _${program} | grep -e '^<files>$' -e '^${words[words.length - 1]}' || true`;
  return execFileSync('zsh', ['-f', '-c', run], { encoding: 'utf8' }).trim().split('\n');
}

function fish(program: Program, line: string): string[] {
  const out = execFileSync(
    'fish',
    ['--no-config', '-c', `${script(program, 'fish')}\ncomplete -C${q(line)}`],
    { encoding: 'utf8', cwd: ROOT },
  );
  return out
    .trim()
    .split('\n')
    .map((l) => l.split('\t')[0]!);
}

const shells = { bash, zsh, fish: (p: Program, words: string[]) => fish(p, words.join(' ')) };

for (const [shell, complete] of Object.entries(shells)) {
  t.test(`${shell}: bundle`, async (t) => {
    t.same(complete('bundle', ['bundle', 'cr']), ['create'], 'subcommands');
    t.ok(complete('bundle', ['bundle', '']).includes('verify'), 'every subcommand offered');
    t.notOk(
      complete('bundle', ['bundle', '']).includes('man'),
      'not the hidden man command (packaging writes bundle(1) with it)',
    );
    t.same(complete('bundle', ['bundle', 'create', '--ke']), ['--key'], "the subcommand's options");
    t.ok(complete('bundle', ['bundle', 'verify', '--']).includes('--help'));
    t.same(complete('bundle', ['bundle', 'cluster', 'st']), ['status'], 'a nested subcommand');
    t.ok(
      complete('bundle', ['bundle', 'cluster', 'status', '--']).includes('--kubeconfig'),
      "a nested subcommand's options",
    );
    t.ok(
      complete('bundle', ['bundle', 'inspect', 'READ']).some(
        (w) => w === 'README.md' || w === '<files>',
      ),
      "file names for a command's argument",
    );
  });

  t.test(`${shell}: bundle-agent`, async (t) => {
    t.same(complete('bundle-agent', ['bundle-agent', 'lo']), ['load'], 'subcommands');
    t.same(
      complete('bundle-agent', ['bundle-agent', 'releases', 'fo']),
      ['forget'],
      'a nested subcommand',
    );
    t.same(
      complete('bundle-agent', ['bundle-agent', 'serve', '--lis']),
      ['--listen'],
      "a command's options",
    );
    t.ok(complete('bundle-agent', ['bundle-agent', '--']).includes('--version'));
  });

  t.test(
    `${shell}: each option once, -h too; the completion command offers its shells, not files`,
    async (t) => {
      for (const program of Object.keys(BIN) as Program[]) {
        const top = complete(program, [program, '-']);
        t.equal(
          top.filter((w) => w === '--version').length,
          1,
          `${program}: --version once: ${top.join(' ')}`,
        );
        t.equal(top.filter((w) => w === '--help').length, 1, `${program}: --help once`);
        t.ok(top.includes('-h'), `${program}: -h`);
        t.ok(
          complete(program, [program, 'completion', '-']).includes('-h'),
          `${program}: -h on a subcommand`,
        );
        t.same(
          complete(program, [program, 'completion', '']).sort(),
          ['bash', 'fish', 'zsh'],
          `${program} completion <Tab>`,
        );
        t.same(
          complete(program, [program, 'completion', 'z']),
          ['zsh'],
          `${program} completion z<Tab>`,
        );
      }
    },
  );
}

t.test(
  'bash for real: a file name with a space is one candidate (bundle-agent load my<Tab>, bundle inspect my<Tab>)',
  async (t) => {
    const dir = await tmpdir(t, 'ob-bash-');
    await writeFile(join(dir, 'my release.bundle'), '');
    t.same(bash('bundle-agent', ['bundle-agent', 'load', 'my'], dir), ['my release.bundle']);
    t.same(bash('bundle', ['bundle', 'inspect', 'my'], dir), ['my release.bundle']);
    // what readline inserts on Tab in an interactive bash on a pty (python3's pty: bash's readline
    // draws nothing on a zsh/zpty one): the name, quoted
    await writeFile(join(dir, 'completion.bash'), script('bundle-agent', 'bash'));
    const driver = `import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp('bash', ['bash', '--norc', '--noprofile', '-i'])
def until(text):
    out, end = b'', time.time() + 20
    while text not in out and time.time() < end:
        if select.select([fd], [], [], 0.1)[0]:
            out += os.read(fd, 4096)
    return out
os.write(fd, b'PS1="$ "; source completion.bash; echo RE""ADY\\n')
until(b'READY\\r\\n')
os.write(fd, b'bundle-agent load my\\t')
sys.stdout.write(until(sys.argv[1].encode()).decode(errors='replace'))
os.kill(pid, 9)
`;
    const want = 'bundle-agent load my\\ release.bundle ';
    const r = spawnSync('python3', ['-c', driver, want], {
      encoding: 'utf8',
      cwd: dir,
      timeout: 60_000,
      env: { PATH: process.env.PATH, HOME: dir, TERM: 'xterm', INPUTRC: '/dev/null' },
    });
    t.ok(
      r.stdout.includes(want),
      `Tab inserted ${JSON.stringify(want)}: ${JSON.stringify(r.stdout)} ${r.stderr}`,
    );
  },
);

t.test('an unknown shell is a usage error naming the three', async (t) => {
  const r = spawnSync(process.execPath, [BIN.bundle, 'completion', 'tcsh'], { encoding: 'utf8' });
  t.not(r.status, 0);
  t.match(r.stderr, /bash, zsh, fish/);
  for (const program of Object.keys(BIN) as Program[]) {
    t.equal(
      spawnSync('zsh', ['-n', '-c', script(program, 'zsh')]).status,
      0,
      `${program}: zsh parses it`,
    );
    t.equal(
      spawnSync('fish', ['--no-execute', '-c', script(program, 'fish')]).status,
      0,
      `${program}: fish parses it`,
    );
  }
});

t.test(
  'zsh for real: compinit autoloads _bundle and _bundle-agent from $fpath; Tab completes, every time',
  async (t) => {
    const dir = await tmpdir(t, 'ob-zsh-');
    for (const program of Object.keys(BIN) as Program[])
      await writeFile(join(dir, `_${program}`), script(program, 'zsh'));
    const cases: [string, string][] = [
      ['bundle cluster st', 'cluster status'],
      ['bundle create --ke', 'create --key'],
      ['bundle cluster st', 'cluster status'],
      ['bundle-agent releases fo', 'releases forget'],
      ['bundle-agent serve --lis', 'serve --listen'],
      ['bundle-agent releases fo', 'releases forget'],
    ];
    // waitfor reads the pty until its output holds the text (the completed word), for up to 10 s
    const driver = `zmodload zsh/zpty
waitfor() {
  local acc= line i
  for ((i = 0; i < 200; i++)); do
    while zpty -r -t z line; do acc+=$line; done
    [[ $acc == *$1* ]] && return 0
    sleep 0.05
  done
  return 1
}
zpty z 'zsh -f -i'
zpty -w z 'PS1="%% "; fpath=(${dir} $fpath); autoload -U compinit; compinit -u -D; bundle() { :; }; bundle-agent() { :; }; print RE""ADY'
waitfor READY || exit 1
${cases.map(([typed, want]) => `zpty -w -n z ${q(typed)}$'\\t'; waitfor ${q(want)} && print -r -- ${q(`ok ${typed}`)}; zpty -w -n z $'\\C-u'`).join('\n')}
zpty -d z
`;
    const r = spawnSync('zsh', ['-f', '-c', driver], {
      encoding: 'utf8',
      timeout: 120_000,
      env: { PATH: process.env.PATH, HOME: dir, TERM: 'xterm' },
    });
    t.same(
      r.stdout.trim().split('\n'),
      cases.map(([typed]) => `ok ${typed}`),
      r.stderr,
    );
  },
);
