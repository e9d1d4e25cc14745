/**
 * Where a process's resident memory lives, read from outside it (/proc/<pid>/smaps), by what each
 * mapping is (issue 44: the soak bench's attribution of the all-in-one's RSS):
 *
 *   wasm      a WebAssembly memory: V8 reserves 8-10 GiB of address space per memory and makes
 *             its start readable and writable as the memory grows, so it shows as an anonymous
 *             rw mapping directly followed by an inaccessible one, the two spanning >= 4 GiB
 *             (PGlite's engine; Node's own llhttp for fetch is a small one). It never shrinks.
 *   arenas    glibc malloc's arenas beside the main one: each a heap of 64 MiB of address space,
 *             64 MiB-aligned, its used part rw and the rest inaccessible (MALLOC_ARENA_MAX caps
 *             how many arenas there are; a long arena takes several heaps)
 *   brk       glibc malloc's main arena, the `[heap]` mapping
 *   v8        other anonymous mappings below 2^46: V8 places its heap pages (every isolate's: the
 *             main thread's, the engine thread's) at random addresses it truncates to 46 bits,
 *             far from where the kernel puts a mapping asked for without a hint (just below the
 *             stack, 0x7f...)
 *   anon      every other anonymous mapping: malloc's blocks above its mmap threshold (the
 *             engine's .wasm bytes among them), thread stacks
 *   jit       anonymous executable mappings: code V8 compiled, JavaScript's and WebAssembly's
 *   files     file-backed mappings: the node binary, shared libraries, ICU data
 *   other     the main stack and the kernel's pages ([stack], [vvar], [vdso])
 *
 * Pure: `parseSmaps` reads the text, `attribute` adds up the resident kB per share.
 */

export interface Mapping {
  start: number;
  end: number;
  perms: string;
  /** The path or pseudo-name (`[heap]`, `[stack]`); '' for an anonymous mapping. */
  path: string;
  rssKb: number;
}

export const SHARES = ['wasm', 'v8', 'arenas', 'brk', 'anon', 'jit', 'files', 'other'] as const;
export type Share = (typeof SHARES)[number];

/** Resident kB per share, and how many WASM memories and malloc arena heaps there were. */
export interface Attribution {
  kb: Record<Share, number>;
  wasmMemories: number;
  arenaHeaps: number;
}

const HEADER = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$/;
const KIB = 1024;
const ARENA_HEAP = 64 * KIB * KIB;
const WASM_RESERVATION = 4 * KIB * KIB * KIB;
/** Where V8's random placement hints end (x64: it truncates them to 46 bits). */
const V8_HINTS_END = 2 ** 46;

/** The mappings of a /proc/<pid>/smaps text, in address order (addresses fit in a double: < 2^47). */
export function parseSmaps(text: string): Mapping[] {
  const out: Mapping[] = [];
  for (const line of text.split('\n')) {
    const h = HEADER.exec(line);
    if (h) {
      out.push({ start: parseInt(h[1]!, 16), end: parseInt(h[2]!, 16), perms: h[3]!, path: h[4]!.trim(), rssKb: 0 });
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && out.length > 0) out[out.length - 1]!.rssKb = Number(rss[1]);
  }
  return out;
}

const anonymous = (m: Mapping | undefined): m is Mapping => m !== undefined && m.path === '';
const inaccessible = (m: Mapping | undefined, after: Mapping): m is Mapping => anonymous(m) && m.perms.startsWith('---') && m.start === after.end;

/** What one mapping is, knowing the mapping after it (a reservation's inaccessible rest). */
export function classify(m: Mapping, next: Mapping | undefined): Share | 'wasm-memory' | 'arena-heap' {
  if (m.path === '[heap]') return 'brk';
  if (m.path.startsWith('[')) return 'other';
  if (m.path !== '') return 'files';
  if (m.perms.includes('x')) return 'jit';
  if (m.perms.startsWith('---')) return 'anon';
  const rest = inaccessible(next, m) ? next : undefined;
  const end = rest?.end ?? m.end;
  if (rest && end - m.start >= WASM_RESERVATION) return 'wasm-memory';
  if (m.start % ARENA_HEAP === 0 && end - m.start === ARENA_HEAP) return 'arena-heap';
  return m.end <= V8_HINTS_END ? 'v8' : 'anon';
}

/** Resident kB by share over `mappings` (parseSmaps' order). */
export function attribute(mappings: Mapping[]): Attribution {
  const kb = Object.fromEntries(SHARES.map((s) => [s, 0])) as Record<Share, number>;
  let wasmMemories = 0;
  let arenaHeaps = 0;
  mappings.forEach((m, i) => {
    const c = classify(m, mappings[i + 1]);
    if (c === 'wasm-memory') wasmMemories++;
    if (c === 'arena-heap') arenaHeaps++;
    kb[c === 'wasm-memory' ? 'wasm' : c === 'arena-heap' ? 'arenas' : c] += m.rssKb;
  });
  return { kb, wasmMemories, arenaHeaps };
}

const mb = (kb: number) => (kb / KIB).toFixed(0);

/** One line: `wasm 34 (2 memories), v8 130, arenas 90 (6 heaps), brk 7, anon 15, jit 10, files 45, other 0` (MB). */
export function formatAttribution(a: Attribution): string {
  return SHARES.map((s) => {
    const n = s === 'wasm' ? ` (${a.wasmMemories} memories)` : s === 'arenas' ? ` (${a.arenaHeaps} heaps)` : '';
    return `${s} ${mb(a.kb[s])}${n}`;
  }).join(', ');
}

/** `later - earlier` per share, MB with a sign: `wasm +12.0, arenas +30.1, ...`. */
export function formatGrowth(earlier: Attribution, later: Attribution): string {
  return SHARES.map((s) => {
    const d = (later.kb[s] - earlier.kb[s]) / KIB;
    return `${s} ${d >= 0 ? '+' : ''}${d.toFixed(1)}`;
  }).join(', ');
}
