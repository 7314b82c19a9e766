/**
 * A man page (roff, man macros) written from a commander program, so that it cannot drift from
 * `--help`: it walks the same command tree through commander's own Help class (the commands,
 * options, arguments and descriptions `--help` shows, hidden ones left out) and takes each
 * command's extra help text (examples, exit codes) as `--help` prints it. What a program's
 * tree does not hold (exit status, environment, files) comes from `ManPageInfo`.
 *
 * Typed structurally: this package does not depend on commander, its two CLIs do.
 */

import { homedir } from 'node:os';

interface HelpLike {
  visibleCommands(cmd: CommandLike): CommandLike[];
  visibleOptions(cmd: CommandLike): OptionLike[];
  visibleArguments(cmd: CommandLike): ArgumentLike[];
  optionTerm(o: OptionLike): string;
  optionDescription(o: OptionLike): string;
  argumentTerm(a: ArgumentLike): string;
  argumentDescription(a: ArgumentLike): string;
  commandUsage(cmd: CommandLike): string;
  commandDescription(cmd: CommandLike): string;
}
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
interface OptionLike {}
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
interface ArgumentLike {}
interface CommandLike {
  name(): string;
  createHelp(): unknown;
  helpInformation(): string;
  outputHelp(): void;
  configureOutput(): object;
  configureOutput(c: { writeOut?: (s: string) => void; writeErr?: (s: string) => void }): unknown;
}

interface ManPageInfo {
  /** 1 for user commands, 8 for daemons and administration. */
  section: 1 | 8;
  version: string;
  /** YYYY-MM-DD: SOURCE_DATE_EPOCH's day when set (reproducible packages), else today. */
  date?: string;
  /** Short line for NAME (default: the program description's first sentence). */
  summary?: string;
  exitStatus: [string, string][];
  environment?: [string, string][];
  files?: [string, string][];
  examples?: string;
  seeAlso?: string[];
  /** Sections of the program's own (a file format's fields), after the commands. */
  sections?: { title: string; text: string; items: [string, string][] }[];
}

/**
 * Escapes text for roff: backslashes, minus signs (so they copy as ASCII), leading dots, and
 * non-ASCII characters as \[uXXXX] (troff reads Latin-1 unless preconv runs first).
 */
function roffText(s: string): string {
  return s
    .replace(/\\/g, '\\e')
    .replace(/-/g, '\\-')
    .replace(
      /[^\n\x20-\x7e]/gu,
      (c) => `\\[u${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}]`,
    )
    .split('\n')
    .map((l) => (/^[.']/.test(l) ? `\\&${l}` : l))
    .join('\n');
}

/** Text kept as laid out (examples, tables of exit codes). */
function verbatim(text: string): string {
  const body = text.replace(/^\n+|\s+$/g, '');
  return body ? `.PP\n.nf\n.RS 2\n${roffText(body)}\n.RE\n.fi\n` : '';
}

/** What `cmd --help` prints after its usage, options and commands (addHelpText 'after'). */
function extraHelp(cmd: CommandLike): string {
  const saved = cmd.configureOutput();
  let all = '';
  cmd.configureOutput({
    writeOut: (s) => {
      all += s;
    },
    writeErr: (s) => {
      all += s;
    },
  });
  try {
    cmd.outputHelp();
  } finally {
    cmd.configureOutput(saved);
  }
  const main = cmd.helpInformation();
  return all.startsWith(main) ? all.slice(main.length) : '';
}

function day(info: ManPageInfo): string {
  if (info.date) return info.date;
  const epoch = Number(process.env.SOURCE_DATE_EPOCH);
  return new Date(
    Number.isFinite(epoch) && process.env.SOURCE_DATE_EPOCH ? epoch * 1000 : Date.now(),
  )
    .toISOString()
    .slice(0, 10);
}

function options(help: HelpLike, cmd: CommandLike): string {
  let out = '';
  for (const a of help.visibleArguments(cmd)) {
    const d = help.argumentDescription(a);
    out += `.TP\n.I ${roffText(help.argumentTerm(a))}\n${d ? roffText(d) : 'see the description'}\n`;
  }
  for (const o of help.visibleOptions(cmd)) {
    // a default computed from $HOME (the cache) is shown as ~, not the packaging machine's home
    const desc = help
      .optionDescription(o)
      .split(homedir())
      .join(homedir() === '/' ? '/' : '~');
    out += `.TP\n.B ${roffText(help.optionTerm(o))}\n${roffText(desc)}\n`;
  }
  return out;
}

/** Every command below `cmd` (depth first), each with its full usage line. */
function commandSections(help: HelpLike, cmd: CommandLike): string {
  let out = '';
  for (const sub of help.visibleCommands(cmd)) {
    if (
      sub.name() === 'help' &&
      help.visibleOptions(sub).length <= 1 &&
      help.visibleCommands(sub).length === 0
    )
      continue; // commander's implicit `help [command]`
    const h = sub.createHelp() as HelpLike;
    out += `.SS "${roffText(h.commandUsage(sub)).replace(/"/g, '""')}"\n${roffText(h.commandDescription(sub))}\n`;
    out += options(h, sub) + verbatim(extraHelp(sub));
    out += commandSections(h, sub);
  }
  return out;
}

function definitionList(items: [string, string][], font = 'B'): string {
  return items
    .map(([term, text]) => `.TP\n.${font} ${roffText(term)}\n${roffText(text)}\n`)
    .join('');
}

/** The whole page for `program` (its name is the page's name). */
export function manPage(program: CommandLike, info: ManPageInfo): string {
  const help = program.createHelp() as HelpLike;
  const name = program.name();
  const description = help.commandDescription(program);
  const summary = info.summary ?? description.split(/(?<=\.)\s/)[0]!.replace(/\.$/, '');
  const subs = help.visibleCommands(program).filter((c) => c.name() !== 'help');
  let page = `.\\" Generated from the program's command definitions by \`${name} man\`: do not edit.\n`;
  page += `.TH ${name.toUpperCase()} ${info.section} "${day(info)}" "offline-bundle ${roffText(info.version)}" "offline-bundle manual"\n`;
  page += '.nh\n.ad l\n'; // no hyphenation, ragged right: option names and paths stay whole
  page += `.SH NAME\n${roffText(name)} \\- ${roffText(summary)}\n`;
  // the usage line --help prints, then what it means for a command
  page += `.SH SYNOPSIS\n.B ${roffText(name)}\n${roffText(help.commandUsage(program).slice(name.length).trim())}\n`;
  if (subs.length)
    page += `.br\n.B ${roffText(name)}\n.I command\n.RI [ options ] " " [ arguments ]\n`;
  page += `.SH DESCRIPTION\n${roffText(description)}\n${verbatim(extraHelp(program))}`;
  page += `.SH OPTIONS\n${options(help, program)}`;
  if (subs.length)
    page += `.SH COMMANDS\nEvery command takes \\fB\\-h\\fR, \\fB\\-\\-help\\fR, which prints what follows for that command.\n${commandSections(help, program)}`;
  for (const s of info.sections ?? [])
    page += `.SH ${roffText(s.title)}\n${roffText(s.text)}\n${definitionList(s.items)}`;
  page += `.SH EXIT STATUS\n${definitionList(info.exitStatus)}`;
  if (info.environment?.length) page += `.SH ENVIRONMENT\n${definitionList(info.environment)}`;
  if (info.files?.length) page += `.SH FILES\n${definitionList(info.files, 'I')}`;
  if (info.examples) page += `.SH EXAMPLES\n${verbatim(info.examples)}`;
  if (info.seeAlso?.length) {
    const last = info.seeAlso.length - 1;
    page += `.SH SEE ALSO\n${info.seeAlso
      .map((s, i) => {
        const m = /^(.+)\((\w+)\)$/.exec(s);
        const sep = i < last ? ',' : '';
        return m ? `.BR ${roffText(m[1]!)} (${m[2]})${sep}` : `${roffText(s)}${sep}`;
      })
      .join('\n')}\n`;
  }
  return page;
}
