/**
 * The sidecar's access token for its agent (issue 43 item 8, `SIDECAR_CREDENTIAL=token`): fetched
 * from the identity authority's token endpoint (`SIDECAR_TOKEN_URL`) for the registry entry the
 * sidecar calls (`SIDECAR_TOKEN_AUDIENCE`, the broker's entry) and used as the agent's credential
 * instead of a VP minted per request.
 *
 * - Grant: `client_credentials` with a `private_key_jwt` client assertion (RFC 7523) signed by the
 *   agent's did:key from the identity file; with `SIDECAR_TOKEN_SUBJECT_FILE` (an approved
 *   delegation's VC), an RFC 8693 exchange whose actor token is the agent's Membership VP. The
 *   assertion's and the VP's audience is the server's `issuer`, read once from its RFC 8414
 *   metadata on the token endpoint's origin.
 * - Renewal: at 80% of the token's lifetime a new one is fetched in the background (a timer, so it
 *   happens without traffic too); every caller shares one fetch in flight (single flight). A
 *   token past its expiry (less 5 s, or a tenth of its lifetime when shorter) is never handed out.
 * - Fail closed: when no usable token can be had (endpoint refused, unreachable, malformed), the
 *   call fails with the reason; there is no fallback to a VP. `invalidate()` drops a token an
 *   enforcement point refused, so the next call fetches a fresh one (or fails with why not).
 * - The token is never logged: only its lifetime and audience are.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { SignJWT } from 'jose';
import { errMsg, logger } from '../runtime/lib/log.js';
import { presentationFor, type LoadedIdentity } from '../runtime/identity/client.js';

const log = logger('sidecar.token');

const METADATA_PATH = '/.well-known/oauth-authorization-server';
const EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const JWT_TYPE = 'urn:ietf:params:oauth:token-type:jwt';
const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';
/** Renew at this fraction of the lifetime. */
export const RENEW_AT = 0.8;
/** A token this close to its expiry (ms; at most a tenth of its lifetime) is not handed out. */
const EXPIRY_MARGIN_MS = 5000;
/** Lifetime of the client assertion and the actor VP (s): one request's worth. */
const PROOF_TTL_S = 60;

export interface TokenSourceOptions {
  /** The token endpoint as the sidecar reaches it. */
  tokenUrl: URL;
  /** The registry entry the token is for. */
  audience: string;
  /** The agent's current identity and registry name (the identity file may be re-provisioned). */
  agent(): { identity: LoadedIdentity; name?: string };
  /** File holding an approved delegation's VC: the exchange's subject token. */
  subjectFile?: string;
  timeoutMs: number;
  now?: () => number;
}

export interface TokenSource {
  /** A usable access token; rejects with the reason when none can be had (fail closed). */
  current(): Promise<string>;
  /** Drops `token` (refused where it was used); the next call fetches another. */
  invalidate(token: string): void;
  close(): void;
}

interface Held {
  token: string;
  renewAt: number;
  /** Expiry less the margin: handed out until then. */
  usableUntil: number;
}

export class TokenUnavailable extends Error {}

/** The RFC 6749 5.2 error of an answer, as one sentence. */
function refusal(status: number, body: Record<string, unknown> | undefined): string {
  const error = typeof body?.error === 'string' ? body.error : `HTTP ${status}`;
  const desc = typeof body?.error_description === 'string' ? `: ${body.error_description}` : '';
  return `token endpoint refused (${error}${desc})`;
}

export function createTokenSource(o: TokenSourceOptions): TokenSource {
  const now = o.now ?? Date.now;
  let issuer: string | undefined;
  let held: Held | undefined;
  let inflight: Promise<Held> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let closed = false;

  async function request(url: URL, init?: RequestInit): Promise<{ status: number; body: Record<string, unknown> | undefined }> {
    let res: Response;
    try {
      res = await fetch(url, { ...init, signal: AbortSignal.timeout(o.timeoutMs), redirect: 'manual' });
    } catch (e) {
      throw new TokenUnavailable(`token endpoint unreachable (${errMsg(e)})`);
    }
    const body = (await res.json().catch(() => undefined)) as Record<string, unknown> | undefined;
    return { status: res.status, body };
  }

  async function issuerOf(): Promise<string> {
    if (issuer) return issuer;
    const { status, body } = await request(new URL(METADATA_PATH, o.tokenUrl));
    if (status !== 200 || typeof body?.issuer !== 'string') throw new TokenUnavailable(`authorization server metadata unreadable (HTTP ${status})`);
    return (issuer = body.issuer);
  }

  async function grantForm(aud: string): Promise<URLSearchParams> {
    const { identity, name } = o.agent();
    if (o.subjectFile) {
      let subject: string;
      try {
        subject = readFileSync(o.subjectFile, 'utf8').trim();
      } catch (e) {
        throw new TokenUnavailable(`cannot read the delegation file ${o.subjectFile} (SIDECAR_TOKEN_SUBJECT_FILE): ${errMsg(e)}`);
      }
      const actor = await presentationFor(identity, { audience: aud, ttlSeconds: PROOF_TTL_S });
      return new URLSearchParams({
        grant_type: EXCHANGE,
        subject_token: subject,
        subject_token_type: JWT_TYPE,
        actor_token: actor,
        actor_token_type: JWT_TYPE,
        audience: o.audience,
      });
    }
    const client = name ?? identity.did;
    const t = Math.floor(now() / 1000);
    const assertion = await new SignJWT({})
      .setProtectedHeader({ alg: 'EdDSA', kid: identity.kid })
      .setIssuer(client)
      .setSubject(client)
      .setAudience(aud)
      .setJti(randomUUID())
      .setIssuedAt(t)
      .setExpirationTime(t + PROOF_TTL_S)
      .sign(identity.key);
    return new URLSearchParams({ grant_type: 'client_credentials', client_assertion_type: JWT_BEARER, client_assertion: assertion, audience: o.audience });
  }

  async function fetchToken(): Promise<Held> {
    const form = await grantForm(await issuerOf());
    const { status, body } = await request(o.tokenUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: form.toString(),
    });
    if (status !== 200) throw new TokenUnavailable(refusal(status, body));
    const token = body?.access_token;
    const ttl = body?.expires_in;
    if (typeof token !== 'string' || !token || typeof ttl !== 'number' || !(ttl > 0))
      throw new TokenUnavailable('token endpoint answered without access_token and expires_in');
    const at = now();
    log.info('access token obtained', { audience: o.audience, expiresIn: ttl, grant: form.get('grant_type') });
    const life = ttl * 1000;
    return { token, renewAt: at + life * RENEW_AT, usableUntil: at + life - Math.min(EXPIRY_MARGIN_MS, life / 10) };
  }

  /** One fetch at a time; on success the renewal timer is set for the new token. */
  function refresh(): Promise<Held> {
    inflight ??= fetchToken()
      .then((h) => {
        held = h;
        schedule(h.renewAt - now());
        return h;
      })
      .finally(() => {
        inflight = undefined;
      });
    return inflight;
  }

  const usable = (h: Held | undefined) => h !== undefined && now() < h.usableUntil;

  function schedule(ms: number): void {
    if (closed) return;
    if (timer) clearTimeout(timer);
    timer = setTimeout(
      () => {
        refresh().catch((e: unknown) => {
          log.warn('access token renewal failed; retrying', { err: errMsg(e) });
          // Retry soon while the held token lasts; a call past its expiry fetches (and fails) itself.
          if (usable(held)) schedule(Math.min(2000, (held!.usableUntil - now()) / 4));
        });
      },
      Math.max(0, ms),
    );
    timer.unref();
  }

  return {
    async current() {
      if (usable(held)) {
        if (now() >= held!.renewAt) void refresh().catch(() => {});
        return held!.token;
      }
      return (await refresh()).token;
    },
    invalidate(token) {
      if (held?.token === token) held = undefined;
    },
    close() {
      closed = true;
      if (timer) clearTimeout(timer);
    },
  };
}
