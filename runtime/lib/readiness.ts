/**
 * Readiness that means ready (Kubernetes sends traffic on the first 200 of `/readyz`).
 *
 * A component names what it must have done before it can serve (`gate`: every listener open,
 * the policy snapshot loaded, the audit chain held, the governance standing fetched once): each
 * gate is pending until its `done()` is called, once. It also names what it cannot decide
 * without while running (`watch`: a function returning the reason while that dependency is
 * gone, e.g. the audit chain's lease lost). `/readyz` answers 200 only with no pending gate and
 * no watch failing, else 503 with every reason. Liveness (`/healthz`) stays a separate, cheap
 * check that never consults this.
 */
import http from 'node:http';
import { sendJson } from './http.js';

export interface Readiness {
  /** A start step that must be done before the first 200; returns its `done` (idempotent). */
  gate(reason: string): () => void;
  /** A running dependency: `check` returns why the component cannot decide now, or undefined. */
  watch(check: () => string | undefined): void;
  /** Why the component is not ready; empty when it is. */
  reasons(): string[];
  ready(): boolean;
}

export function createReadiness(): Readiness {
  const pending = new Set<object>();
  const reasonOf = new Map<object, string>();
  const watches: Array<() => string | undefined> = [];
  return {
    gate(reason) {
      const token = {};
      pending.add(token);
      reasonOf.set(token, reason);
      return () => {
        pending.delete(token);
        reasonOf.delete(token);
      };
    },
    watch(check) {
      watches.push(check);
    },
    reasons() {
      const out = [...pending].map((t) => reasonOf.get(t)!);
      for (const w of watches) {
        const r = w();
        if (r) out.push(r);
      }
      return out;
    },
    ready() {
      return this.reasons().length === 0;
    },
  };
}

/** The `/readyz` answer: `[status, body]` (200 `{ready: true, ...detail}` or 503 `{ready: false, reasons}`). */
export function readyzAnswer(r: Readiness, detail?: () => Record<string, unknown>): [200 | 503, Record<string, unknown>] {
  const reasons = r.reasons();
  if (reasons.length === 0) return [200, { ready: true, ...detail?.() }];
  return [503, { ready: false, error: 'not ready', reasons }];
}

/**
 * A plain-HTTP health listener (the operator's, the webhook's): `GET /healthz` (liveness: the
 * process answers) and `GET /readyz` (readiness as `r` says); anything else 404.
 */
export function createHealthServer(r: Readiness): http.Server {
  return http.createServer((req, res) => {
    req.resume();
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz' || path === '/livez') return sendJson(res, 200, { ok: true });
    if (path === '/readyz') {
      const [status, body] = readyzAnswer(r);
      return sendJson(res, status, body);
    }
    sendJson(res, 404, { error: `no route ${path}: GET /healthz or /readyz` });
  });
}
