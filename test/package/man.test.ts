// bundle(1) and bundle-agent(8), as `pnpm package` writes them (each CLI's hidden `man`
// command): groff renders them without a warning, and every command and option that `--help`
// lists (walked recursively, each subcommand's own --help) is in the rendered page, so the page
// cannot drift from the program.
import t from 'tap';
import { execFile, spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { tmpdir } from '../helpers/tmp.mjs';

const run = promisify(execFile);
const ROOT = new URL('../../', import.meta.url).pathname;
const CLIS = [
  { name: 'bundle', section: 1, bin: join(ROOT, 'builder/bin/bundle.js') },
  { name: 'bundle-agent', section: 8, bin: join(ROOT, 'agent/bin/bundle-agent.js') },
];

interface Help {
  path: string[];
  usage: string;
  options: string[];
  commands: string[];
}

/** The terms of one `--help` section: lines indented by two spaces, up to the column gap. */
function terms(text: string, heading: string): string[] {
  const at = text.indexOf(`\n${heading}:\n`);
  if (at < 0) return [];
  const out: string[] = [];
  for (const line of text.slice(at + heading.length + 3).split('\n')) {
    if (line === '' || !line.startsWith(' ')) break;
    const m = /^ {2}(\S.*?)(?: {2,}|$)/.exec(line);
    if (m) out.push(m[1]!);
  }
  return out;
}

/** `--help` of the program and of every command below it. */
async function walk(bin: string, path: string[] = []): Promise<Help[]> {
  const { stdout } = await run(process.execPath, [bin, ...path, '--help'], {
    env: { ...process.env, COLUMNS: '200' },
  });
  const commands = terms(stdout, 'Commands')
    .map((c) => c.split(' ')[0]!)
    .filter((c) => c !== 'help');
  const here: Help = {
    path,
    usage: /^Usage: (.*)$/m.exec(stdout)![1]!,
    options: terms(stdout, 'Options'),
    commands,
  };
  const below = await Promise.all(commands.map((c) => walk(bin, [...path, c])));
  return [here, ...below.flat()];
}

t.test('groff is here to render the pages', async (t) => {
  t.equal(
    spawnSync('groff', ['--version']).status,
    0,
    'groff (groff-base, installed by scripts/setup.sh)',
  );
});

for (const cli of CLIS) {
  t.test(
    `${cli.name}(${cli.section}): renders cleanly and holds every command and option of --help`,
    async (t) => {
      const dir = await tmpdir(t, 'ob-man-');
      const page = (
        await run(process.execPath, [cli.bin, 'man'], {
          env: { ...process.env, SOURCE_DATE_EPOCH: '1700000000' },
        })
      ).stdout;
      t.match(
        page,
        new RegExp(`^\\.TH ${cli.name.toUpperCase()} ${cli.section} "2023-11-14" `, 'm'),
        'title line dated by SOURCE_DATE_EPOCH',
      );
      const file = join(dir, `${cli.name}.${cli.section}`);
      await writeFile(file, page);
      const r = spawnSync('groff', ['-man', '-Tutf8', '-ww', '-P-cbou', '-rLL=200n', file], {
        encoding: 'utf8',
      });
      t.equal(r.status, 0, 'groff exits 0');
      t.equal(r.stderr, '', 'no groff warnings');
      const text = r.stdout;
      for (const s of [
        'NAME',
        'SYNOPSIS',
        'DESCRIPTION',
        'OPTIONS',
        'COMMANDS',
        'EXIT STATUS',
        'ENVIRONMENT',
        'FILES',
        'EXAMPLES',
        'SEE ALSO',
      ]) {
        t.match(text, new RegExp(`^${s}$`, 'm'), `section ${s}`);
      }
      t.notMatch(page, /\/root\/|\/home\//, 'no home directory of the packaging machine');
      t.notMatch(
        text,
        /\bman\b.*print the .* man page/,
        'the hidden man command is not documented',
      );

      const helps = await walk(cli.bin);
      t.ok(helps.length > 5, `${helps.length} commands walked`);
      let missing = 0;
      for (const h of helps) {
        if (!text.includes(h.usage)) {
          missing++;
          t.fail(`usage "${h.usage}" missing`);
        }
        for (const o of h.options)
          if (!text.includes(o)) {
            missing++;
            t.fail(`${[cli.name, ...h.path].join(' ')}: option "${o}" missing`);
          }
      }
      t.equal(
        missing,
        0,
        `every usage line and option of ${helps.length} --help outputs is in the page`,
      );
      // a command's extra help (examples, exit codes) comes along
      if (cli.name === 'bundle') {
        t.match(text, /Exit codes: 0 written, 1 error/, "create's exit codes");
        // every exit a signal gives create is in the page's EXIT STATUS, not only in --help
        const { SIGNAL_EXIT } = await import(join(ROOT, 'builder/dist/commands/signal-exit.js'));
        const status = text.slice(text.indexOf('\nEXIT STATUS\n'), text.indexOf('\nENVIRONMENT\n'));
        t.ok(status.length > 0, 'an EXIT STATUS section before ENVIRONMENT');
        for (const [signal, code] of Object.entries(SIGNAL_EXIT as Record<string, number>)) {
          t.match(status, new RegExp(`\\b${code}\\b`), `EXIT STATUS names ${code}`);
          t.match(status, new RegExp(`\\b${signal}\\b`), `and ${signal}`);
        }
      } else t.match(text, /Exit codes, as "systemctl status" uses them/, "status's exit codes");

      // man(1) itself, where man-db is installed
      if (spawnSync('man', ['--version']).status === 0) {
        const m = spawnSync('man', ['-l', file], {
          encoding: 'utf8',
          env: { ...process.env, MANWIDTH: '120', MAN_KEEP_FORMATTING: '' },
        });
        t.equal(m.status, 0, 'man -l renders it');
        t.match(m.stdout, new RegExp(`${cli.name} - `), 'man -l shows the NAME line');
      }
    },
  );
}
