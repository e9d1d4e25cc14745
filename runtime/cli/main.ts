/**
 * `writ <command> [args]`: the command-line tool for GitOps CI. One file per command; each
 * exports `run(args, io) -> exit code`. Add a command with one line in COMMANDS.
 */
import { BRAND } from '../lib/brand.js';
import { processSetting } from '../lib/settings.js';

export interface Io {
  out(line: string): void;
  err(line: string): void;
  /** WRIT_API_KEY: presented to a management API with WRIT_API_AUTH=keys. */
  apiKey?: string;
}

export type Command = { summary: string; load: () => Promise<{ run(args: string[], io: Io): Promise<number> }> };

export const COMMANDS: Record<string, Command> = {
  validate: { summary: 'validate <dir|file>...  check resources against the CRD schemas and CEL rules (offline)', load: () => import('./validate.js') },
  diff: { summary: 'diff <dir> --server <mgmt url> [--owner <owner>]  what applying the folder would change (dry run)', load: () => import('./diff.js') },
  audit: {
    summary: 'audit verify --checkpoint <file> --server <mgmt url> | --export <file>  prove the audit log extends a kept checkpoint',
    load: () => import('./audit.js'),
  },
};

const stdio: Io = { out: (l) => process.stdout.write(l + '\n'), err: (l) => process.stderr.write(l + '\n'), apiKey: processSetting('apiKey') };

function usage(io: Io): void {
  io.err(`usage: ${BRAND} <command> [args]\n\ncommands:`);
  for (const [name, c] of Object.entries(COMMANDS)) io.err(`  ${c.summary.startsWith(name) ? c.summary : `${name}  ${c.summary}`}`);
}

/** Runs one command; returns the process exit code (2 for a usage error). */
export async function main(argv: string[], io: Io = stdio): Promise<number> {
  const [name, ...args] = argv;
  const cmd = name ? COMMANDS[name] : undefined;
  if (!cmd) {
    if (name && name !== '--help' && name !== '-h' && name !== 'help') io.err(`${BRAND}: unknown command ${JSON.stringify(name)}`);
    usage(io);
    return name === '--help' || name === '-h' || name === 'help' ? 0 : 2;
  }
  try {
    return await (await cmd.load()).run(args, io);
  } catch (e) {
    io.err(`${BRAND} ${name}: ${e instanceof Error ? e.message : String(e)}`);
    return 2;
  }
}
