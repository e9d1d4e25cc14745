/**
 * The README's walkthrough ("A first walk through Writ"), run as written (issue 42: "a test runs
 * the walkthrough's commands as written"). The section between `<!-- walkthrough:begin` and
 * `<!-- walkthrough:end -->` is read from README.md:
 *
 * - an `sh` block after `<!-- walkthrough:background -->` is a server the newcomer leaves running
 *   in its own terminal (`npm start`, the MCP reference server): started in the background, then
 *   the test waits for Writ's `/readyz` (`:8181`) and the reference server's port (`:3001`);
 * - every other `sh` block is a step, run in order in one bash (later steps use the variables and
 *   functions of earlier ones, as in the newcomer's terminal), and compared with the next fenced
 *   block (`text` or `json`): the answer the README tells the newcomer to expect.
 *
 * The commands keep the README's ports (9191, 8181, 8090, 8080, 3001): everything runs in its own
 * network namespace (`unshare -rnpf`: user, network and PID namespaces), whose loopback is empty, so
 * nothing is rewritten and nothing on the machine is in the way; when the namespace ends every
 * process started in it ends too. Where `unshare` is not permitted the test is skipped (it says so).
 * The one difference from a newcomer's shell: `WRIT_DATA_DIR` names a fresh temp folder (the README
 * asks for a fresh start), and the environment is only PATH and HOME.
 *
 * Both sides are normalised the same way before comparing (`normalise`), for what a fresh start
 * cannot fix: the `Date` header, UUIDs, timestamps, audit record numbers, and the approval
 * request's own `digest` (it covers ids and times). Everything else, the SHA-256 of a tool call's
 * arguments included, must match exactly.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface Walkthrough {
  background: string[];
  steps: { commands: string; expected: string }[];
}

/** The walkthrough section of a README: its background servers and its steps (pure). */
export function walkthroughOf(markdown: string): Walkthrough {
  const begin = markdown.indexOf('<!-- walkthrough:begin');
  const end = markdown.indexOf('<!-- walkthrough:end -->');
  if (begin < 0 || end < begin) throw new Error('README.md: no <!-- walkthrough:begin ... walkthrough:end --> section');
  const section = markdown.slice(begin, end);
  const out: Walkthrough = { background: [], steps: [] };
  let pending: string | undefined;
  for (const m of section.matchAll(/(<!-- walkthrough:background -->\s*)?^```(\w*)\n([\s\S]*?)^```$/gm)) {
    const [, background, lang, body] = m;
    if (lang === 'sh' && background) out.background.push(body!);
    else if (lang === 'sh') {
      if (pending !== undefined) throw new Error(`walkthrough step without an expected answer:\n${pending}`);
      pending = body!;
    } else {
      if (pending === undefined) throw new Error(`walkthrough answer without a command:\n${body}`);
      out.steps.push({ commands: pending, expected: body! });
      pending = undefined;
    }
  }
  if (pending !== undefined) throw new Error(`walkthrough step without an expected answer:\n${pending}`);
  return out;
}

/** What differs between two fresh starts, replaced by a placeholder (applied to both sides). */
export function normalise(text: string): string {
  return text
    .replace(/\r/g, '')
    .replace(/^Date: .*$/gm, 'Date: <date>')
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<uuid>')
    .replace(/\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d(:?\d\d)?)?/g, '<time>')
    .replace(/audit record \d+/g, 'audit record <seq>')
    .replace(/"auditSeq":\d+/g, '"auditSeq":<seq>')
    .replace(/"digest":"[A-Za-z0-9_-]{43}"/g, '"digest":"<digest>"')
    .replace(/[ \t]+$/gm, '')
    .trim();
}

/** The bash script run in the namespace: servers in the background, then each step, its output in a file. */
function runner(w: Walkthrough, dir: string): string {
  const file = (name: string, body: string) => {
    writeFileSync(join(dir, name), body);
    return join(dir, name);
  };
  const lines = ['set -u', `cd ${JSON.stringify(ROOT)}`];
  w.background.forEach((b, i) => {
    // Started by a subshell that exits at once, so a step's bare `wait` never waits for a server.
    lines.push(`( bash ${file(`background-${i}.sh`, b)} > ${join(dir, `background-${i}.log`)} 2>&1 & )`);
  });
  lines.push(
    `mark() { echo "$1:\${SECONDS}" >> ${join(dir, 'times')}; }`,
    // Up to 4 minutes: `npm start` compiles through tsx, slow on a loaded 2-core machine.
    'up() { curl -sf localhost:8181/readyz > /dev/null && (echo > /dev/tcp/127.0.0.1/3001) 2> /dev/null; }',
    'for _ in $(seq 1 1200); do up && break; sleep 0.2; done',
    'up || { echo "not ready after 240 s: Writ on :8181/readyz and the MCP server on :3001" >&2; exit 3; }',
  );
  lines.push('mark ready');
  w.steps.forEach((s, i) => lines.push(`{\n${s.commands}\n} > ${join(dir, `step-${i}.out`)} 2>&1`, `mark step-${i + 1}`));
  return lines.join('\n') + '\n';
}

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const namespaces = spawnSync('unshare', ['-rnpf', '--kill-child', '--mount-proc', 'bash', '-c', 'ip link set lo up'], { encoding: 'utf8' });
const canIsolate = namespaces.status === 0;
if (!canIsolate) console.warn(`walkthrough test skipped: no network namespace here (unshare -rnpf: ${namespaces.error?.message ?? namespaces.stderr.trim()})`);

describe('README walkthrough: the section', () => {
  it('has the two servers and a step (with its answer) for each stage of issue 42', () => {
    const w = walkthroughOf(readme);
    expect(w.background.map((b) => b.trim())).toEqual(['npm start', 'PORT=3001 npx @modelcontextprotocol/server-everything streamableHttp']);
    const all = w.steps.map((s) => s.commands).join('\n');
    for (const what of [
      "X-Writ-Service: web'",
      '/v1/delegations/request',
      '/approve',
      'localhost:8080/mcp/everything',
      '"method":"tools/call"',
      '/v1/egress/requests',
    ])
      expect(all).toContain(what);
  });

  it('normalise replaces only what a fresh start cannot fix', () => {
    expect(normalise('Date: Wed, 02 Dec 2026 01:48:49 GMT\n{"id":"4ffcc61c-101c-48e4-9738-4c12a8ebbf99","at":"2026-12-02T01:49:26.066Z"}  \n')).toBe(
      'Date: <date>\n{"id":"<uuid>","at":"<time>"}',
    );
    expect(normalise('(audit record 20)","auditSeq":20 "digest":"5vZytjQbLb4JFwar2wuMpSisqeMJDRZDTVbrDrjCxW8" sha256:44136fa3')).toBe(
      '(audit record <seq>)","auditSeq":<seq> "digest":"<digest>" sha256:44136fa3',
    );
    expect(normalise('{"allow":true}')).not.toBe(normalise('{"allow":false}'));
  });
});

describe.skipIf(!canIsolate)('README walkthrough: run as written', () => {
  const dir = mkdtempSync(join(tmpdir(), 'writ-walkthrough-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('every step answers what the README says', async () => {
    const w = walkthroughOf(readme);
    const script = join(dir, 'runner.sh');
    writeFileSync(script, runner(w, dir));
    // The outer bash is PID 1 of the namespace: the servers are reparented to it, never to the runner.
    const child = spawn('unshare', ['-rnpf', '--kill-child', '--mount-proc', 'bash', '-c', `ip link set lo up && bash ${script}`], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, WRIT_DATA_DIR: join(dir, 'data') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 330_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    clearTimeout(timer);
    const log = (i: number) => (existsSync(join(dir, `background-${i}.log`)) ? readFileSync(join(dir, `background-${i}.log`), 'utf8').slice(-3000) : '');
    expect(code, `runner: ${stderr}\nnpm start:\n${log(0)}`).toBe(0);
    // One comparison of every step, so a failure shows each answer that changed.
    const answers = w.steps.map((_, i) => (existsSync(join(dir, `step-${i}.out`)) ? readFileSync(join(dir, `step-${i}.out`), 'utf8') : '(not run)'));
    const label = (s: { commands: string }, i: number) => `step ${i + 1}: ${s.commands.trim().split('\n')[0]}`;
    expect(
      w.steps.map((s, i) => `${label(s, i)}\n${normalise(answers[i]!)}`),
      `timings (s since start): ${readFileSync(join(dir, 'times'), 'utf8').trim().split('\n').join(' ')}`,
    ).toEqual(w.steps.map((s, i) => `${label(s, i)}\n${normalise(s.expected)}`));
  }, 360_000);
});
