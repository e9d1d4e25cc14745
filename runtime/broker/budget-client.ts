/**
 * The broker's side of reserve-then-settle (issue 14): asks the control plane's
 * `POST /v1/budgets/{agent}/reservations` for a completion's worst case before the provider is
 * called. Settlement rides on the usage report (`reservation` field). Never throws: an answer it
 * cannot use is `unavailable` and the broker refuses the call (fail closed).
 */
import { request, type Dispatcher } from 'undici';
import { errMsg } from '../lib/log.js';

export interface ReserveBody {
  promptTokens: number;
  outputTokens: number;
  priceInputPer1k: number;
  priceOutputPer1k: number;
  partial?: boolean;
  ttlMs?: number;
}

export type ReserveResult =
  | { kind: 'reserved'; id: string | null; outputTokens: number }
  | { kind: 'refused'; message: string; retryAfterSeconds: number }
  | { kind: 'unavailable'; why: string };

export interface BudgetClient {
  reserve(agent: string, body: ReserveBody): Promise<ReserveResult>;
}

export function createBudgetClient(o: { baseUrl: string; timeoutMs: number; dispatcher: Dispatcher; apiKey?: string }): BudgetClient {
  const base = o.baseUrl.replace(/\/+$/, '');
  // WRIT_API_KEY for a management listener with WRIT_API_AUTH=keys (scope budgets:reserve).
  const headers: Record<string, string> = { 'content-type': 'application/json', ...(o.apiKey ? { authorization: `Bearer ${o.apiKey}` } : {}) };
  return {
    async reserve(agent, body) {
      try {
        const res = await request(`${base}/v1/budgets/${encodeURIComponent(agent)}/reservations`, {
          method: 'POST',
          headers,
          body: JSON.stringify(body),
          dispatcher: o.dispatcher,
          headersTimeout: o.timeoutMs,
          bodyTimeout: o.timeoutMs,
        });
        const j = (await res.body.json().catch(() => undefined)) as Record<string, unknown> | undefined;
        if (res.statusCode === 200 && j && (typeof j.id === 'string' || j.id === null) && typeof j.outputTokens === 'number') {
          return { kind: 'reserved', id: j.id as string | null, outputTokens: j.outputTokens };
        }
        if (res.statusCode === 429 && j && typeof j.error === 'string') {
          return { kind: 'refused', message: j.error, retryAfterSeconds: typeof j.retryAfterSeconds === 'number' ? j.retryAfterSeconds : 60 };
        }
        return { kind: 'unavailable', why: `control plane answered ${res.statusCode}${j && typeof j.error === 'string' ? `: ${j.error}` : ''}` };
      } catch (e) {
        return { kind: 'unavailable', why: errMsg(e) };
      }
    },
  };
}
