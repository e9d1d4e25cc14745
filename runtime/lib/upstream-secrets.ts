/**
 * An upstream's own credential (issue 43 item 7: no agent token ever goes upstream; the upstream
 * gets what its registry entry's `upstreamAuth` names instead). The value is a Secret's, never a
 * literal in the resource: read from `<dir>/<secret name>/<key>`, the layout of a Kubernetes
 * Secret volume (the chart mounts each named Secret at `<dir>/<name>`; the all-in-one reads the same
 * layout on disk). Re-read after `ttlMs` so a rotated Secret is used without a restart. Values are
 * never logged.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Service, UpstreamAuth } from '../control-plane/types.js';

export interface UpstreamSecrets {
  /** The header and value to send, or a reason it cannot be sent (then the call is refused: fail closed). */
  credential(auth: UpstreamAuth): { header: string; value: string } | { failed: string };
}

/** `dir` undefined: every `upstreamAuth` fails closed (no Secrets are mounted). */
export function createUpstreamSecrets(dir: string | undefined, o: { ttlMs?: number; now?: () => number } = {}): UpstreamSecrets {
  const ttl = o.ttlMs ?? 10_000;
  const now = o.now ?? Date.now;
  const cache = new Map<string, { value: string | undefined; at: number }>();

  function read(name: string, key: string): string | undefined {
    const path = join(dir!, name, key);
    const hit = cache.get(path);
    if (hit && now() - hit.at < ttl) return hit.value;
    let value: string | undefined;
    try {
      value = readFileSync(path, 'utf8').replace(/\r?\n$/, '');
    } catch {
      value = undefined;
    }
    cache.set(path, { value, at: now() });
    return value;
  }

  return {
    credential(auth) {
      if (!auth.secretRef) return { failed: 'upstream credential: the entry names no secretRef' };
      const { name, key } = auth.secretRef;
      if (!dir) return { failed: `upstream credential ${name}/${key}: no Secrets are mounted (UPSTREAM_SECRETS_DIR unset)` };
      const value = read(name, key);
      // A value a header cannot carry is refused rather than sent altered.
      if (!value || !/^[\x20-\x7e]+$/.test(value)) return { failed: `upstream credential ${name}/${key} is not readable` };
      const scheme = auth.scheme ?? 'Bearer';
      return { header: (auth.header ?? 'Authorization').toLowerCase(), value: scheme ? `${scheme} ${value}` : value };
    },
  };
}

/** The credential a registry target's `upstreamAuth` names, a refusal when it cannot be read, or undefined when it names none. */
export function upstreamCredential(
  entry: Service | undefined,
  secrets: UpstreamSecrets | undefined,
): { header: string; value: string } | { failed: string } | undefined {
  if (!entry?.upstreamAuth) return undefined;
  // An exchanged token is upstream-tokens.ts `upstreamAuthOf`'s: a caller that cannot send one refuses rather than send the call bare.
  if (entry.upstreamAuth.exchange) return { failed: `${entry.name} takes a token exchanged for it, which is not sent here` };
  return secrets ? secrets.credential(entry.upstreamAuth) : { failed: `upstream credential for ${entry.name}: no Secrets are mounted` };
}
