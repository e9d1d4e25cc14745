/**
 * What a budget that is a ceiling costs a decision (issue 14): the broker's `/authz` call with
 * `X-Writ-Reserve` (the decision reserves the completion's worst case against the agent's
 * `tokensPerHour` and `costUsdPerDay` in the shared ledger before it answers) against the same
 * egress decision without it, in the same run, rounds interleaved. The control plane runs on
 * PGlite in a temporary data folder (the reservation rows are written to it) in a child process, with the audit
 * chain in memory and with it shipped to the store; autocannon drives it from this process.
 * The budgets are far above what the run spends, so every reservation is granted and left to
 * expire (no usage report settles it here: the broker's settle is its own post after the reply).
 *
 *   npx tsx bench/budget.bench.ts    (BENCH_SECONDS=4 per round, BENCH_ROUNDS=3, BENCH_CONNECTIONS=50)
 *
 * Prints req/s, p50 and p99 of each and the ratio reserve / no reserve per audit mode (no target
 * is set; the broker bench carries the latency targets of the whole broker hop).
 */
import { fileURLToPath } from 'node:url';
import { H } from '../runtime/lib/brand.js';
import { formatReserve } from '../runtime/lib/reservation-header.js';
import { ask, codeUnderTest, loadAutocannon, median, servePlanePair, startServer } from './lib.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);

interface Ports {
  durable: number;
  memory: number;
}

const CODE = codeUnderTest();

async function serve(): Promise<void> {
  const planes = await servePlanePair([
    { name: 'gpt', upstream: 'broker.default.svc:8080', kind: 'model' },
    {
      name: 'bot',
      upstream: 'bot.agents.svc:8080',
      kind: 'agent',
      allowModels: ['gpt'],
      budget: { tokensPerHour: 1e12, costUsdPerDay: 1e9, callsPerHour: 1e12 },
    },
  ]);
  process.send?.(planes satisfies Ports);
}

async function drive(): Promise<void> {
  const autocannon = await loadAutocannon();
  const { child, ready: ports } = await startServer<Ports>(fileURLToPath(import.meta.url));
  const egress = { [H.actor]: 'bot', [H.service]: 'gpt', [H.targetKind]: 'model', [H.onBehalfOf]: 'alice@example.com', [H.task]: 'bench' };
  // A chat completion's worst case as the broker asks it: a bounded prompt and max_tokens, priced.
  const reserve = { ...egress, [H.reserve]: formatReserve({ promptTokens: 1200, outputTokens: 800, priceInputPer1k: 0.00015, priceOutputPer1k: 0.0006 }) };
  const targets = [
    { name: 'egress, audit in memory', port: ports.memory, headers: egress },
    { name: 'egress + reserve, audit in memory', port: ports.memory, headers: reserve },
    { name: 'egress, audit to PGlite', port: ports.durable, headers: egress },
    { name: 'egress + reserve, audit to PGlite', port: ports.durable, headers: reserve },
  ];
  const run = async (t: (typeof targets)[number], duration: number) => {
    const r = await autocannon({ url: `http://127.0.0.1:${t.port}/authz/v1/chat/completions`, connections: CONNECTIONS, headers: t.headers, duration });
    if (r.errors || r.non2xx) throw new Error(`${t.name}: ${r.errors} errors, ${r.non2xx} non-2xx responses`);
    return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99 };
  };
  try {
    for (const t of targets) await run(t, WARMUP);
    await ask(child, 'settle');
    const rounds: { rps: number; p50: number; p99: number }[][] = [];
    for (let i = 0; i < ROUNDS; i++) {
      // The order reversed every other round, so neither side always runs first.
      const order = i % 2 ? [...targets.keys()].reverse() : [...targets.keys()];
      const round: { rps: number; p50: number; p99: number }[] = [];
      for (const j of order) {
        round[j] = await run(targets[j]!, SECONDS);
        await ask(child, 'settle');
      }
      rounds.push(round);
    }
    console.log(
      `budget bench: /authz egress with and without the broker's reservation, ${CONNECTIONS} connections, ${ROUNDS} interleaved rounds of ${SECONDS} s, ${CODE.label}`,
    );
    targets.forEach((t, i) => {
      const rps = median(rounds.map((r) => r[i]!.rps));
      const p50 = median(rounds.map((r) => r[i]!.p50));
      const p99 = median(rounds.map((r) => r[i]!.p99));
      // Each reserve row against the row before it (same audit mode), per round, median.
      const ratio = i % 2 ? `  ratio ${median(rounds.map((r) => r[i]!.rps / r[i - 1]!.rps)).toFixed(2)}x of no reserve` : '';
      console.log(`${t.name.padEnd(36)} ${rps.toFixed(0).padStart(7)} req/s  p50 ${String(p50).padStart(3)} ms  p99 ${String(p99).padStart(3)} ms${ratio}`);
    });
  } finally {
    child.send('stop');
    await new Promise((r) => child.once('exit', r));
  }
}

if (process.argv.includes('--serve')) await serve();
else await drive();
