/**
 * The identity authority (SPEC 4.4, management port :8090): discovery, agents, VPs,
 * task-scoped delegations, revocation, plus the enterprise routes mounted through their seam.
 * `createIdentityAuthority` builds the app in-process; `startIdentityAuthority` serves it.
 */
import { getRequestListener } from '@hono/node-server';
import { swaggerUI } from '@hono/swagger-ui';
import http from 'node:http';
import { createApi } from '../lib/api.js';
import { apiAuth, authOf, authorizedFor, credentialCheck } from '../lib/api-auth.js';
import { oidcOf } from '../lib/oidc.js';
import { BRAND, BRAND_TITLE } from '../lib/brand.js';
import type { AuthConfig, Config, IdentityConfig } from '../lib/config.js';
import { DEFAULTS } from '../lib/settings.js';
import { envelope } from '../lib/errors.js';
import { close as closeServer, listen, listenerDeadline } from '../lib/http.js';
import { errMsg, logger } from '../lib/log.js';
import { identityTracing, initTracing, shutdownTracing } from '../lib/tracing.js';
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

/** The slices the identity authority reads: its own, the API auth, the listener's deadline, tracing. */
export type IdentitySlices = Pick<Config, 'identity' | 'auth' | 'process' | 'tracing'>;

/** The authority's settings from its slice: the issuer's did:web and public URL derive from IDP_ISSUER_HOST. */
export function identitySettings(c: IdentityConfig): IdentitySettings {
  const host = c.issuerHost;
  const issuerDid = didWeb(host);
  const plainHost = host
    .replace(/^https?:\/\//, '')
    .replace(/%3A/gi, ':')
    .replace(/\/+$/, '');
  return {
    issuerDid,
    publicUrl: (c.publicUrl ?? `${/^(localhost|127\.|\[::1\])/.test(plainHost) ? 'http' : 'https'}://${plainHost}`).replace(/\/+$/, ''),
    membershipTtlSeconds: c.membershipTtlSeconds,
    capabilityTtlSeconds: c.capabilityTtlSeconds,
    defaultAudience: c.vpAudience,
    clockSkewSeconds: c.clockSkewSeconds,
  };
}

/** The control plane's registry over its management API when IDP_REGISTRY_URL is set. */
function registryOf(c: Pick<IdentityConfig, 'registryUrl'>, auth: Pick<AuthConfig, 'apiKey'>): RegistryFacts | undefined {
  return c.registryUrl ? httpRegistry({ baseUrl: c.registryUrl, apiKey: auth.apiKey }) : undefined;
}

function oauthContext(
  id: IdentityContext,
  c: Pick<IdentityConfig, 'tokenTtlSeconds'>,
  registry: () => RegistryFacts | undefined,
  oidc: OAuthContext['oidc'],
  enforcementPoint: OAuthContext['enforcementPoint'],
): OAuthContext {
  const issuer = id.settings.publicUrl;
  return { id, issuer, tokenEndpoint: `${issuer}${TOKEN_PATH}`, tokenTtlSeconds: c.tokenTtlSeconds, registry, oidc, enforcementPoint };
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

export function createIdentityAuthority(o: { store: Store; config?: Pick<IdentitySlices, 'identity' | 'auth'>; now?: () => number }): IdentityAuthority {
  const config = o.config ?? DEFAULTS;
  const now = o.now ?? Date.now;
  const settings = identitySettings(config.identity);
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
    loadIssuerKey(o.store, { did: settings.issuerDid, secret: config.identity.keyEncryptionKey })
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
  const keys = keyService({ db: o.store.db, now, pepper: config.identity.apiKeyPepper, changes });
  const auth = authOf(config.auth);
  const oidc = oidcOf(config.identity.oidc);
  let registry = registryOf(config.identity, config.auth);
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
  const authorized = (authorization: string | undefined, scope: string) => authorizedFor(auth, check, authorization, scope);
  const oauth = oauthContext(
    ctx,
    config.identity,
    () => registry,
    oidc,
    (authorization) => authorized(authorization, 'identity:verify'),
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
  app.route('/', enterpriseRoutes({ store: o.store, now, config: config.identity, changes, keys }));
  app.doc31('/openapi.json', { openapi: '3.1.0', info: { title: `${BRAND_TITLE} identity authority`, version: '1.0.0' } });
  app.get('/docs', swaggerUI({ url: '/openapi.json' }));

  return {
    app,
    authorized,
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
  /** Its configuration (loadConfig's); default: every default. */
  config?: IdentitySlices;
  /** Listen address, default `:${PORT || 8090}`. */
  addr?: string;
  now?: () => number;
}

export async function startIdentityAuthority(o: StartOptions = {}): Promise<{ port: number; authority: IdentityAuthority; close(): Promise<void> }> {
  const config = o.config ?? DEFAULTS;
  const deadline = listenerDeadline(config.process);
  const ownTracing = initTracing(config.tracing, `${BRAND}-identity`);
  const ownStore = !o.store;
  const store = o.store ?? (await openStore({ ...config.identity.store }));
  const authority = createIdentityAuthority({ store, config, now: o.now });
  // verify-presentation, the egress hot path, is answered on node:http directly (fast-verify.ts).
  const server = http.createServer(deadline, withFastVerify(authority, getRequestListener(authority.app.fetch)));
  let port: number;
  try {
    port = await listen(server, o.addr ?? `:${config.identity.port}`);
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
