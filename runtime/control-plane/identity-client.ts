/**
 * The control plane's HTTP client of the identity authority (an IdentityPort).
 *
 * - `verifyPresentation` POSTs to /v1/agents/verify-presentation. Successful answers are cached
 *   by SHA-256 of (audience, token) until the earlier of the presentation's expiry (the `exp` the
 *   authority reports: min of VP and Membership VC expiry) and a short revalidation interval.
 *   Concurrent verifications of the same token share one request.
 * - A revocation watcher polls /v1/revocations (ETag, so an unchanged list is a 304) every
 *   `pollMs` and drops every cached entry whose Membership VC jti was revoked: a revocation cuts
 *   cached egress within `pollMs` plus one round trip. If the watcher has not heard from the
 *   authority for `staleMs`, the cache is not trusted: every verification goes to the authority
 *   (which fails closed when it is down).
 * - `checkDelegation` is never cached: GET /v1/delegations/check on every regulated egress. An
 *   answer that could not be had is `{ok:false, unavailable:true}`: an outage, not a "no".
 * - A standing watcher polls /v1/governance/standing (ETag) every half revocation period (250 ms by
 *   default, also when the revocation watcher is off) and keeps every governed agent's status for
 *   the decision engine.
 *
 * In the all-in-one the two per-request calls (verify-presentation, the delegation check) are
 * answered in process (`local`), the same answers without the loopback request.
 *
 * Every method resolves (never rejects); any error or timeout answers `{ok:false, reason}`.
 */
import { Pool } from 'undici';
import { errMsg, logger } from '../lib/log.js';
import { sha256 } from '../lib/sha256.js';
import { injectTrace } from '../lib/tracing.js';
import type { DelegationAnswer, DelegationQuery, GovernanceStanding, IdentityPort, PresentationAnswer } from './identity-port.js';
import type { HumanStanding } from '../lib/access-token.js';
import { followTokens, type TokenFollower } from './identity-tokens.js';
import { parseJws } from '../lib/jws.js';
import type { ExchangeAnswer } from '../lib/upstream-tokens.js';
import { GRANT, TOKEN_PATH, TOKEN_TYPE } from '../identity/oauth/context.js';

const log = logger('identity-client');

export interface IdentityClientOptions {
  /** Base URL of the identity authority, e.g. http://127.0.0.1:8090. */
  baseUrl: string;
  /** Per-request timeout (ms). Default 2000. */
  timeoutMs?: number;
  /** Longest a successful verification is reused before asking again (ms). Default 30 000. */
  revalidateMs?: number;
  /** Revocation poll interval (ms). Default 500; 0 disables the watcher (and the cache). */
  pollMs?: number;
  /** Without a successful poll for this long, the cache is bypassed (ms). Default max(3 x pollMs, 2000). */
  staleMs?: number;
  /** Most cached verifications kept (oldest evicted first). Default 10 000. */
  maxEntries?: number;
  now?: () => number;
  /** WRIT_API_KEY: presented on every call (the authority's WRIT_API_AUTH=keys; scope identity:verify). */
  apiKey?: string;
  /** Observes each call (metrics): operation, seconds, outcome. */
  onCall?: (operation: string, seconds: number, outcome: 'ok' | 'error' | 'timeout' | 'http_error') => void;
  /**
   * The two calls made once per agent request, answered in process (the all-in-one, where the
   * authority shares this process: identity/in-process.ts): the loopback request and its answer
   * on both ends of this event loop are skipped. Each resolves with the route's 200 body, or
   * rejects with the `status` and `body` the route would have answered instead, read as that answer. Cache,
   * revocation and standing watchers and every other call are unchanged (HTTP).
   */
  local?: LocalIdentity;
}

/** The identity authority's per-request calls in process (see `local`). */
export interface LocalIdentity {
  verifyPresentation(vp: string, audience?: string): Promise<unknown>;
  checkDelegation(q: DelegationQuery): Promise<unknown>;
}

/** Metric label of a call: its route, never its query. */
const OPERATIONS: Record<string, string> = {
  '/v1/agents/verify-presentation': 'verify_presentation',
  '/v1/delegations/check': 'delegation_check',
  '/v1/keys/verify': 'key_verify',
  '/v1/revocations': 'revocations',
  '/v1/governance/standing': 'standing',
  '/.well-known/oauth-authorization-server': 'oauth_metadata',
  '/.well-known/jwks.json': 'jwks',
  [TOKEN_PATH]: 'token_exchange',
};

interface Entry {
  answer: PresentationAnswer;
  until: number;
  jti: string | null;
}

interface VerifyBody {
  ok?: unknown;
  agentName?: unknown;
  agentDid?: unknown;
  reason?: unknown;
  membershipJti?: unknown;
  exp?: unknown;
}

interface CheckBody {
  ok?: unknown;
  reason?: unknown;
  vcJti?: unknown;
  notAfter?: unknown;
  delegationId?: unknown;
}

export interface IdentityClient extends IdentityPort {
  /** Cached verifications right now (for tests and metrics). */
  cacheSize(): number;
  /** Runs one revocation poll now; resolves true when the authority answered. */
  pollRevocations(): Promise<boolean>;
  /** Runs one governance-standing fetch now; resolves true when the authority answered. */
  pollStanding(): Promise<boolean>;
  /** Writ access tokens, checked offline against the revocation and standing feeds (identity-tokens.ts). */
  tokens(): TokenFollower;
  /** POST /v1/keys/verify: the key's id and scopes when it is a valid, active key; undefined otherwise. */
  verifyApiKey(key: string): Promise<{ id: string; scopes: string[]; tenantId: string | null } | undefined>;
  close(): Promise<void>;
}

/** The standing route's answer as the port keeps it (agents; humans when the authority sends them), or undefined when malformed. */
function standingOf(json: unknown): Omit<GovernanceStanding, 'fetchedAt'> | undefined {
  const { agents, humans } = (json ?? {}) as { agents?: unknown; humans?: unknown };
  if (!agents || typeof agents !== 'object') return undefined;
  const map = new Map<string, string>();
  for (const [k, v] of Object.entries(agents as Record<string, unknown>)) if (typeof v === 'string') map.set(k, v);
  if (!humans || typeof humans !== 'object') return { agents: map };
  const people = new Map<string, HumanStanding>();
  for (const [k, v] of Object.entries(humans as Record<string, { deactivated?: unknown; tokensNotBefore?: unknown }>)) {
    const nb = typeof v?.tokensNotBefore === 'number' ? v.tokensNotBefore : null;
    // Unreadable: taken as deactivated (deny on ambiguity).
    people.set(k, { deactivated: v?.deactivated !== false, tokensNotBefore: nb });
  }
  return { agents: map, humans: people };
}

const str = (v: unknown): string | undefined => (typeof v === 'string' && v.length > 0 ? v : undefined);

export function createIdentityClient(opts: IdentityClientOptions): IdentityClient {
  const base = new URL(opts.baseUrl);
  const prefix = base.pathname.replace(/\/+$/, '');
  const timeoutMs = opts.timeoutMs ?? 2000;
  const revalidateMs = opts.revalidateMs ?? 30_000;
  const pollMs = opts.pollMs ?? 500;
  const staleMs = opts.staleMs ?? Math.max(3 * pollMs, 2000);
  const maxEntries = opts.maxEntries ?? 10_000;
  const now = opts.now ?? Date.now;
  const pool = new Pool(base.origin, { connections: 32, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });

  const cache = new Map<string, Entry>();
  const byJti = new Map<string, Set<string>>();
  const inflight = new Map<string, Promise<PresentationAnswer>>();
  let lastPollOk = Number.NEGATIVE_INFINITY;
  let etag: string | undefined;
  /** Every revoked jti, as of the last poll that read the list. */
  let revoked = new Set<string>();
  let closed = false;
  const auth: Record<string, string> = opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {};

  async function call(
    method: 'GET' | 'POST',
    path: string,
    body?: string,
    extra?: Record<string, string>,
  ): Promise<{ status: number; json: unknown; headers: Record<string, unknown> }> {
    // The active trace context (a decision's span) travels with the call.
    const headers: Record<string, string> = injectTrace({ accept: 'application/json', ...auth, ...extra });
    if (body !== undefined) headers['content-type'] ??= 'application/json';
    const op = OPERATIONS[path.split('?')[0] ?? ''] ?? 'other';
    const t0 = performance.now();
    let res: Awaited<ReturnType<typeof pool.request>>;
    try {
      res = await pool.request({ method, path: prefix + path, headers, body, signal: AbortSignal.timeout(timeoutMs) });
    } catch (e) {
      opts.onCall?.(op, (performance.now() - t0) / 1000, (e as { name?: string }).name === 'TimeoutError' ? 'timeout' : 'error');
      throw e;
    }
    opts.onCall?.(op, (performance.now() - t0) / 1000, res.statusCode >= 500 ? 'http_error' : 'ok');
    if (res.statusCode === 304) {
      await res.body.dump();
      return { status: 304, json: undefined, headers: res.headers };
    }
    const text = await res.body.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.statusCode, json, headers: res.headers };
  }

  function forget(key: string): void {
    const e = cache.get(key);
    if (!e) return;
    cache.delete(key);
    if (e.jti) {
      const keys = byJti.get(e.jti);
      keys?.delete(key);
      if (keys && keys.size === 0) byJti.delete(e.jti);
    }
  }

  function remember(key: string, entry: Entry): void {
    forget(key);
    while (cache.size >= maxEntries) {
      const oldest = cache.keys().next().value;
      if (oldest === undefined) break;
      forget(oldest);
    }
    cache.set(key, entry);
    if (entry.jti) {
      let keys = byJti.get(entry.jti);
      if (!keys) byJti.set(entry.jti, (keys = new Set()));
      keys.add(key);
    }
  }

  const cacheTrusted = () => pollMs > 0 && now() - lastPollOk <= staleMs;

  /** A call answered in process (`local`): its body as a 200, or the status and body it was refused with. */
  async function localCall(op: string, run: () => Promise<unknown>): Promise<{ status: number; json: unknown }> {
    const t0 = performance.now();
    try {
      const json = await run();
      opts.onCall?.(op, (performance.now() - t0) / 1000, 'ok');
      return { status: 200, json };
    } catch (e) {
      const refusal = e as { status?: unknown; body?: unknown };
      if (typeof refusal.status !== 'number') {
        opts.onCall?.(op, (performance.now() - t0) / 1000, 'error');
        throw e;
      }
      opts.onCall?.(op, (performance.now() - t0) / 1000, refusal.status >= 500 ? 'http_error' : 'ok');
      return { status: refusal.status, json: refusal.body };
    }
  }

  async function verifyRemote(vp: string, audience: string | undefined, key: string): Promise<PresentationAnswer> {
    try {
      const local = opts.local;
      const { status, json } = local
        ? await localCall('verify_presentation', () => local.verifyPresentation(vp, audience))
        : await call('POST', '/v1/agents/verify-presentation', JSON.stringify(audience ? { vp, audience } : { vp }));
      const b = (json ?? {}) as VerifyBody;
      if (status !== 200) {
        const err = (b as { error?: { message?: unknown } }).error;
        return { ok: false, reason: `identity authority answered ${status}${typeof err?.message === 'string' ? `: ${err.message}` : ''}` };
      }
      const out: PresentationAnswer = { ok: b.ok === true, reason: str(b.reason) ?? (b.ok === true ? 'ok' : 'presentation rejected') };
      const name = str(b.agentName);
      const did = str(b.agentDid);
      if (name) out.agentName = name;
      if (did) out.agentDid = did;
      if (out.ok && !name) return { ok: false, reason: 'identity authority verified the presentation but named no agent' };
      if (out.ok && cacheTrusted()) {
        const t = now();
        const expMs = typeof b.exp === 'number' && Number.isFinite(b.exp) ? b.exp * 1000 : t;
        const until = Math.min(expMs, t + revalidateMs);
        if (until > t) remember(key, { answer: out, until, jti: str(b.membershipJti) ?? null });
      }
      return out;
    } catch (e) {
      return { ok: false, reason: `identity authority unreachable: ${(e as Error).name === 'TimeoutError' ? 'timeout' : errMsg(e)}` };
    }
  }

  // The cache key of the last VP asked about: a miss in `cachedPresentation` (the decision's sync
  // look) is followed by `verifyPresentation` of the same VP, which would hash it again.
  let lastVp = '';
  let lastAudience: string | undefined;
  let lastKey = '';
  const keyOf = (vp: string, audience: string | undefined): string => {
    if (lastKey !== '' && vp === lastVp && audience === lastAudience) return lastKey;
    lastKey = sha256(`${audience ?? ''}\n${vp}`, 'base64url');
    lastVp = vp;
    lastAudience = audience;
    return lastKey;
  };

  /** A live, trusted cached answer for `key`; a stale one is dropped. */
  function cached(key: string): PresentationAnswer | undefined {
    const hit = cache.get(key);
    if (!hit) return undefined;
    if (hit.until > now() && cacheTrusted()) return hit.answer;
    forget(key);
    return undefined;
  }

  async function verifyPresentation(vp: string, audience?: string): Promise<PresentationAnswer> {
    if (closed) return { ok: false, reason: 'identity client closed' };
    const key = keyOf(vp, audience);
    const hit = cached(key);
    if (hit) return hit;
    const pending = inflight.get(key);
    if (pending) return pending;
    const p = verifyRemote(vp, audience, key).finally(() => inflight.delete(key));
    inflight.set(key, p);
    return p;
  }

  async function checkDelegation(q: DelegationQuery): Promise<DelegationAnswer> {
    if (closed) return { ok: false, reason: 'identity client closed' };
    try {
      const local = opts.local;
      const qs = new URLSearchParams({ actor: q.actor, task: q.task, action: q.action, resource: q.resource });
      const { status, json } = local ? await localCall('delegation_check', () => local.checkDelegation(q)) : await call('GET', `/v1/delegations/check?${qs}`);
      if (status !== 200) return { ok: false, unavailable: true, reason: `identity authority answered ${status}` };
      const b = (json ?? {}) as CheckBody;
      const out: DelegationAnswer = { ok: b.ok === true, reason: str(b.reason) ?? (b.ok === true ? 'delegation approved' : 'no delegation') };
      const id = str(b.delegationId);
      const jti = str(b.vcJti);
      if (id) out.delegationId = id;
      if (jti) out.vcJti = jti;
      if (typeof b.notAfter === 'number' && Number.isFinite(b.notAfter)) out.notAfter = b.notAfter;
      return out;
    } catch (e) {
      return { ok: false, unavailable: true, reason: `identity authority unreachable: ${(e as Error).name === 'TimeoutError' ? 'timeout' : errMsg(e)}` };
    }
  }

  async function pollRevocations(): Promise<boolean> {
    try {
      const { status, json, headers } = await call('GET', '/v1/revocations', undefined, etag ? { 'if-none-match': etag } : undefined);
      if (status === 304) {
        lastPollOk = now();
        return true;
      }
      const list = (json as { revoked?: unknown } | undefined)?.revoked;
      if (status !== 200 || !Array.isArray(list)) return false;
      const next = new Set<string>();
      for (const jti of list) {
        if (typeof jti !== 'string') continue;
        next.add(jti);
        const keys = byJti.get(jti);
        if (keys) for (const k of [...keys]) forget(k);
      }
      revoked = next;
      const tag = headers.etag;
      etag = typeof tag === 'string' ? tag : undefined;
      lastPollOk = now();
      return true;
    } catch {
      return false;
    }
  }

  let standing: GovernanceStanding | undefined;
  let standingTag: string | undefined;
  const standingListeners = new Set<() => void>();

  /** One fetch of the governance standing; true when the authority answered. */
  async function pollStanding(): Promise<boolean> {
    try {
      const { status, json, headers } = await call(
        'GET',
        '/v1/governance/standing',
        undefined,
        standingTag && standing ? { 'if-none-match': standingTag } : undefined,
      );
      if (status === 304 && standing) {
        standing = { ...standing, fetchedAt: now() };
        return true;
      }
      const read = status === 200 ? standingOf(json) : undefined;
      if (!read) return false;
      standing = { ...read, fetchedAt: now() };
      const tag = headers.etag;
      standingTag = typeof tag === 'string' ? tag : undefined;
      for (const l of standingListeners) l();
      return true;
    } catch {
      return false;
    }
  }
  let standingTimer: NodeJS.Timeout | undefined;
  // Twice as often as the revocation poll (250 ms by default): a cascade cuts egress well within 1 s.
  const standingMs = Math.max(100, Math.floor((pollMs > 0 ? pollMs : 500) / 2));
  const standingLoop = async () => {
    await pollStanding();
    if (!closed) standingTimer = setTimeout(() => void standingLoop(), standingMs).unref();
  };
  void standingLoop();

  const tokens = followTokens({
    get: async (path) => {
      const r = await call('GET', path);
      return r.status === 200 ? r.json : undefined;
    },
    isRevoked: (jti) => revoked.has(jti),
    revocationsCurrent: cacheTrusted,
    standing: () => standing,
    standingMaxAgeMs: staleMs,
    now,
  });
  let tokensLoaded = false;

  let timer: NodeJS.Timeout | undefined;
  let failing = false;
  const loop = async () => {
    // The token key is read with the first poll, and retried with each until it is had.
    if (!tokensLoaded) tokensLoaded = await tokens.load();
    const ok = await pollRevocations();
    if (ok !== !failing) {
      failing = !ok;
      if (failing) log.warn('identity authority revocation poll failing; VP cache bypassed', { url: base.origin });
      else log.info('identity authority revocation poll ok', { url: base.origin });
    }
    if (!closed) timer = setTimeout(() => void loop(), pollMs).unref();
  };
  if (pollMs > 0) void loop();

  async function verifyApiKey(key: string): Promise<{ id: string; scopes: string[]; tenantId: string | null } | undefined> {
    const { status, json } = await call('POST', '/v1/keys/verify', JSON.stringify({ key }));
    const out = json as { valid?: unknown; key?: { id?: unknown; scopes?: unknown; tenantId?: unknown } } | undefined;
    if (status !== 200 || out?.valid !== true || typeof out.key?.id !== 'string' || !Array.isArray(out.key.scopes)) return undefined;
    const t = out.key.tenantId;
    // A tenant that is not a string, or absent from an answer that should carry it, binds the key to something unknown.
    const tenantId = t === null ? null : typeof t === 'string' ? t : '?';
    return { id: out.key.id, scopes: out.key.scopes.filter((s): s is string => typeof s === 'string'), tenantId };
  }

  /** The onward exchange (identity/oauth/onward.ts): the agent's token for one the upstream of `audience` gets. */
  async function exchangeToken(subjectToken: string, audience: string): Promise<ExchangeAnswer> {
    if (closed) return { ok: false, reason: 'identity client closed' };
    const form = new URLSearchParams({ grant_type: GRANT.exchange, subject_token: subjectToken, subject_token_type: TOKEN_TYPE.accessToken, audience });
    try {
      const { status, json } = await call('POST', TOKEN_PATH, form.toString(), { 'content-type': 'application/x-www-form-urlencoded' });
      const b = (json ?? {}) as { access_token?: unknown; error?: unknown; error_description?: unknown };
      const exp = typeof b.access_token === 'string' ? parseJws(b.access_token)?.payload.exp : undefined;
      if (status === 200 && typeof exp === 'number') return { ok: true, token: b.access_token as string, exp };
      return {
        ok: false,
        reason: `identity authority answered ${status}${typeof b.error === 'string' ? ` ${b.error}` : ''}${typeof b.error_description === 'string' ? `: ${b.error_description}` : ''}`,
      };
    } catch (e) {
      return { ok: false, reason: `identity authority unreachable: ${(e as Error).name === 'TimeoutError' ? 'timeout' : errMsg(e)}` };
    }
  }

  return {
    verifyPresentation,
    verifyApiKey,
    exchangeToken,
    cachedPresentation: (vp, audience) => (closed ? undefined : cached(keyOf(vp, audience))),
    checkDelegation,
    pollRevocations,
    pollStanding,
    standing: () => standing,
    tokens: () => tokens,
    onStanding(l) {
      standingListeners.add(l);
      return () => standingListeners.delete(l);
    },
    cacheSize: () => cache.size,
    async close() {
      if (closed) return;
      closed = true;
      if (timer) clearTimeout(timer);
      if (standingTimer) clearTimeout(standingTimer);
      cache.clear();
      byJti.clear();
      await pool.close().catch(() => {});
    },
  };
}
