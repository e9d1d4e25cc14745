/**
 * `writ audit`: prove the control plane's audit log from outside.
 *
 *   writ audit checkpoint --server <mgmt url> [--chain <id>]
 *       prints the newest signed checkpoint (keep it: it is what a later check compares with)
 *   writ audit verify --checkpoint <file> --server <mgmt url> [--key <jwks file>]
 *       streams the chain from the server and proves it still extends the kept checkpoint:
 *       links and hashes recompute from genesis (or the signed prune anchor) to the end, and
 *       the record at the checkpoint's seq has the checkpoint's hash
 *   writ audit verify --export <file> [--checkpoint <file>] [--key <jwks file>]
 *       the same, offline, over an export (GET /v1/audit/export) kept in cold storage
 *
 * The checkpoint's key is pinned by its kid (the key's RFC 7638 thumbprint, inside the signed
 * header), so a key served by a tampered server cannot verify an old checkpoint. Prints the
 * result as JSON; exit 0 when it verifies, 1 when it does not, 2 for a usage error.
 */
import { createReadStream, readFileSync } from 'node:fs';
import { decodeJwt } from 'jose';
import { AUDIT_KEY_PATH, verifyExport, type Jwks, type OfflineResult } from '../control-plane/audit/index.js';
import { withCredential } from '../../operator/ports.js';
import type { Io } from './main.js';

/** WRIT_API_KEY for a management API with WRIT_API_AUTH=keys (scope audit:read). */
const credential = (io: Io) => withCredential(undefined, io.apiKey);

const USAGE = `usage:
  audit checkpoint --server <mgmt url> [--chain <id>]
  audit verify --checkpoint <file> --server <mgmt url> [--key <jwks file>]
  audit verify --export <file> [--checkpoint <file>] [--key <jwks file>]`;

function flags(args: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${JSON.stringify(a)}\n${USAGE}`);
    const v = args[i + 1];
    if (v === undefined || v.startsWith('--')) throw new Error(`${a} needs a value\n${USAGE}`);
    out[a.slice(2)] = v;
    i++;
  }
  return out;
}

/** A kept checkpoint file: the compact JWS itself, or JSON with a `jws` field (as served). */
export function readCheckpointFile(path: string): string {
  const text = readFileSync(path, 'utf8').trim();
  if (text.startsWith('{')) {
    const j = JSON.parse(text) as { jws?: unknown };
    if (typeof j.jws !== 'string') throw new Error(`${path}: no "jws" field`);
    return j.jws;
  }
  return text;
}

async function* lines(stream: AsyncIterable<Uint8Array | string>): AsyncGenerator<string> {
  const dec = new TextDecoder();
  let buf = '';
  for await (const chunk of stream) {
    buf += typeof chunk === 'string' ? chunk : dec.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      yield buf.slice(0, i);
      buf = buf.slice(i + 1);
    }
  }
  if (buf) yield buf;
}

async function getJson(io: Io, url: string): Promise<unknown> {
  const res = await fetch(url, credential(io));
  if (!res.ok) throw new Error(`GET ${url}: ${res.status} ${await res.text()}`);
  return res.json();
}

function report(io: Io, r: OfflineResult): number {
  io.out(JSON.stringify(r, null, 2));
  return r.ok ? 0 : 1;
}

export async function run(args: string[], io: Io): Promise<number> {
  const [sub, ...rest] = args;
  if (sub !== 'verify' && sub !== 'checkpoint') {
    io.err(USAGE);
    return 2;
  }
  const f = flags(rest);
  const server = f.server?.replace(/\/+$/, '');
  if (sub === 'checkpoint') {
    if (!server) throw new Error(`--server is required\n${USAGE}`);
    const q = f.chain ? `?chain=${encodeURIComponent(f.chain)}` : '';
    const all = (await getJson(io, `${server}/v1/audit/checkpoints${q}`)) as { seq: number }[];
    const newest = all[all.length - 1];
    if (!newest) throw new Error('the server has no checkpoint yet');
    io.out(JSON.stringify(newest, null, 2));
    return 0;
  }
  const kept = f.checkpoint ? readCheckpointFile(f.checkpoint) : undefined;
  const pinned = f.key ? (JSON.parse(readFileSync(f.key, 'utf8')) as Jwks) : undefined;
  if (f.export) {
    return report(io, await verifyExport(lines(createReadStream(f.export)), { jwks: pinned, checkpoint: kept }));
  }
  if (!kept || !server) throw new Error(`verify needs --checkpoint and --server (or --export)\n${USAGE}`);
  const chainId = String(decodeJwt(kept).chainId ?? '');
  const jwks = pinned ?? ((await getJson(io, `${server}${AUDIT_KEY_PATH}`)) as Jwks);
  const res = await fetch(`${server}/v1/audit/export?chain=${encodeURIComponent(chainId)}&from=1`, credential(io));
  if (!res.ok || !res.body) throw new Error(`export: ${res.status} ${await res.text()}`);
  return report(io, await verifyExport(lines(res.body), { jwks, checkpoint: kept }));
}
