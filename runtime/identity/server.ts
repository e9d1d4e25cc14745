/**
 * The identity authority (SPEC 4.4, management port :8090): discovery, agents, VPs,
 * task-scoped delegations, revocation, plus the enterprise routes mounted through their seam.
 * `createIdentityAuthority` builds the app in-process; `startIdentityAuthority` serves it.
 */
import { getRequestListener } from '@hono/node-server';
import { swaggerUI } from '@hono/swagger-ui';
import http from 'node:http';
import { createApi } from '../lib/api.js';
import { apiAuth, authFromEnv, authorizedFor, credentialCheck } from '../lib/api-auth.js';
import { oidcFromEnv } from '../lib/oidc.js';
import { BRAND, BRAND_TITLE, envName, VP_AUDIENCE } from '../lib/brand.js';
import { int, oneOf, optional, str, type Env } from '../lib/config.js';
import { envelope } from '../lib/errors.js';
import { close as closeServer, listen, listenerDeadline } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import { identityTracing, initTracing, shutdownTracing, tracingFromEnv } from '../lib/tracing.js';
import { openStore, type Store } from '../store/factory.js';
import type { OpenAPIHono } from '@hono/zod-openapi';
import { enterpriseBodyLimit, enterpriseRoutes } from './enterprise/index.js';
import { keyService } from './enterprise/keys/service.js';
import { createChangeFeed } from './change-feed.js';
import { notReady, type IdentityContext, type IdentitySettings } from './context.js';
import { didWeb } from './did.js';
import { withFastVerify } from './fast-verify.js';
import { loadIssuerKey } from './issuer-key.js';
import { TOKEN_PATH, type OAuthContext } from './oauth/context.js';
import { httpRegistry, type RegistryFacts } from './oauth/registry.js';
import { oauthRoutes } from './oauth/routes.js';
import { agentRoutes } from './routes-agents.js';
import { delegationRoutes } from './routes-delegations.js';
import { discoveryRoutes } from './routes-discovery.js';
import type { IssuerKey } from './vc.js';
import { createVerifyIndex } from './verify-index.js';

const log = logger('identity');

export const DEFAULT_ISSUER_HOST = 'localhost:8090';

export function settingsFromEnv(env: Env): IdentitySettings {
  const host = str(env, 'IDP_ISSUER_HOST', DEFAULT_ISSUER_HOST);
  const issuerDid = didWeb(host);
  const plainHost = host
    .replace(/^https?:\/\//, '')
    .replace(/%3A/gi, ':')
    .replace(/\/+$/, '');
  return {
    issuerDid,
    publicUrl: str(env, 'IDP_PUBLIC_URL', `${/^(localhost|127\.|\[::1\])/.test(plainHost) ? 'http' : 'https'}://${plainHost}`).replace(/\/+$/, ''),
    membershipTtlSeconds: int(env, 'IDP_MEMBERSHIP_TTL_SECONDS', 30 * 24 * 3600),
    capabilityTtlSeconds: int(env, 'IDP_CAPABILITY_TTL_SECONDS', 30 * 24 * 3600),
    defaultAudience: str(env, 'IDP_VP_AUDIENCE', VP_AUDIENCE),
    clockSkewSeconds: int(env, 'IDP_CLOCK_SKEW_SECONDS', 30),
  };
}

/** The control plane's registry over its management API when IDP_REGISTRY_URL is set. */
function registryFromEnv(env: Env): RegistryFacts | undefined {
  const url = optional(env, 'IDP_REGISTRY_URL');
  return url ? httpRegistry({ baseUrl: url, apiKey: optional(env, envName('API_KEY')) }) : undefined;
}

function oauthContext(id: IdentityContext, env: Env, registry: () => RegistryFacts | undefined, oidc: OAuthContext['oidc']): OAuthContext {
  const issuer = id.settings.publicUrl;
  return { id, issuer, tokenEndpoint: `${issuer}${TOKEN_PATH}`, tokenTtlSeconds: int(env, 'IDP_TOKEN_TTL_SECONDS', 300), registry, oidc };
}

export interface IdentityAuthority {
  app: OpenAPIHono;
  /** The listener's credential check (WRIT_API_AUTH): true when `authorization` may call `scope`. */
  authorized(authorization: string | undefined, scope: string): Promise<boolean>;
  ready(): boolean;
  /** Resolves once the issuer key is loaded (rejects only if closed first). */
  whenReady(): Promise<void>;
  issuerDid: string;
  context: IdentityContext;
  /** The registry the token endpoint reads (the all-in-one hands its control plane's in process). */
  useRegistry(registry: RegistryFacts): void;
  close(): Promise<void>;
}

/** Paths answered before the issuer key is loaded. */
const ALWAYS = new Set(['/healthz', '/readyz', '/openapi.json', '/docs']);

export function createIdentityAuthority(o: { store: Store; env?: Env; now?: () => number }): IdentityAuthority {
  const env = o.env ?? process.env;
  const now = o.now ?? Date.now;
  const settings = settingsFromEnv(env);
  let key: IssuerKey | undefined;
  let closed = false;
  let retry: NodeJS.Timeout | undefined;
  let resolveReady!: () => void;
  let rejectReady!: (e: Error) => void;
  const readyP = new Promise<void>((res, rej) => {
    resolveReady = res;
    rejectReady = rej;
  });
  readyP.catch(() => {});

  const changes = createChangeFeed(o.store);
  const ctx: IdentityContext = {
    store: o.store,
    now,
    settings,
    issuer: () => {
      if (!key) throw notReady();
      return key;
    },
    changes,
    verifyIndex: createVerifyIndex(o.store, changes),
  };

  // The store is migrated by openStore; the key load is the remaining readiness step. It is
  // retried so a briefly unreachable database does not leave the replica unready forever.
  const load = () => {
    loadIssuerKey(o.store, { did: settings.issuerDid, secret: optional(env, 'IDP_KEY_ENCRYPTION_KEY') })
      .then((k) => {
        if (closed) return;
        key = k;
        log.info('issuer key loaded', { issuerDid: k.did });
        resolveReady();
      })
      .catch((e) => {
        if (closed) return;
        log.error('issuer key load failed; retrying in 2 s', { err: errMsg(e) });
        retry = setTimeout(load, 2000);
        retry.unref();
      });
  };
  load();

  // API keys are verified by the same service that serves them (its cache follows the change feed).
  const keys = keyService({ db: o.store.db, now, env, changes });
  const auth = authFromEnv(env);
  const oidc = oidcFromEnv(env);
  let registry = registryFromEnv(env);
  const oauth = oauthContext(ctx, env, () => registry, oidc);
  // Workforce OIDC tokens too (the OIDC_* settings), as on the control plane's management API.
  const check = credentialCheck(
    {
      oidc,
      verifyKey: async (token) => {
        const r = await keys.verify(token);
        return r.valid && r.key ? { id: r.key.id, scopes: r.key.scopes, tenantId: r.key.tenantId } : undefined;
      },
    },
    now,
  );
  const app = createApi({ bodyLimitFor: enterpriseBodyLimit, formPath: (p) => p.startsWith('/oauth/') });
  app.use('*', identityTracing());
  app.use('*', apiAuth({ ...auth, check, deny: (c, status, message) => c.json(envelope(status === 401 ? 'unauthorized' : 'forbidden', message), status) }));
  app.use('*', async (c, next) => {
    if (!key && !ALWAYS.has(c.req.path)) return c.json(envelope('not_ready', 'identity authority is starting'), 503);
    return next();
  });
  app.route(
    '/',
    discoveryRoutes(ctx, () => key !== undefined),
  );
  app.route('/', agentRoutes(ctx));
  app.route('/', delegationRoutes(ctx));
  app.route('/', oauthRoutes(oauth));
  app.route('/', enterpriseRoutes({ store: o.store, now, env, changes, keys }));
  app.doc31('/openapi.json', { openapi: '3.1.0', info: { title: `${BRAND_TITLE} identity authority`, version: '1.0.0' } });
  app.get('/docs', swaggerUI({ url: '/openapi.json' }));

  return {
    app,
    authorized: (authorization, scope) => authorizedFor(auth, check, authorization, scope),
    ready: () => key !== undefined,
    whenReady: () => readyP,
    issuerDid: settings.issuerDid,
    context: ctx,
    useRegistry: (r) => {
      registry = r;
    },
    close: async () => {
      closed = true;
      if (retry) clearTimeout(retry);
      rejectReady(new Error('identity authority closed'));
      await changes.close();
    },
  };
}

export interface StartOptions {
  /** An open store; when absent one is opened from IDP_STORE_BACKEND / IDP_DB_URL / IDP_DATA_DIR and closed on close. */
  store?: Store;
  env?: Env;
  /** Listen address, default `:${PORT || 8090}`. */
  addr?: string;
  now?: () => number;
}

export async function startIdentityAuthority(o: StartOptions = {}): Promise<{ port: number; authority: IdentityAuthority; close(): Promise<void> }> {
  const env = o.env ?? process.env;
  const deadline = listenerDeadline(env);
  const ownTracing = initTracing(tracingFromEnv(env), `${BRAND}-identity`);
  const ownStore = !o.store;
  const store =
    o.store ??
    (await openStore({
      backend: oneOf(env, 'IDP_STORE_BACKEND', ['postgres', 'pglite', 'memory'] as const, optional(env, 'IDP_DB_URL') ? 'postgres' : 'pglite'),
      url: optional(env, 'IDP_DB_URL'),
      dataDir: str(env, 'IDP_DATA_DIR', '.data/identity'),
    }));
  const authority = createIdentityAuthority({ store, env, now: o.now });
  // verify-presentation, the egress hot path, is answered on node:http directly (fast-verify.ts).
  const server = http.createServer(deadline, withFastVerify(authority, getRequestListener(authority.app.fetch)));
  let port: number;
  try {
    port = await listen(server, o.addr ?? `:${str(env, 'PORT', '8090')}`);
  } catch (e) {
    await authority.close();
    if (ownStore) await store.close();
    if (ownTracing) await shutdownTracing();
    throw e;
  }
  log.info('identity authority listening', { port, issuerDid: authority.issuerDid });
  return {
    port,
    authority,
    close: async () => {
      await authority.close();
      await closeServer(server);
      if (ownStore) await store.close();
      if (ownTracing) await shutdownTracing();
    },
  };
}
