/** What the OAuth endpoints share: the identity context, their URLs, the registry port, OIDC. */
import { BRAND } from '../../lib/brand.js';
import type { OidcVerifier } from '../../lib/oidc.js';
import type { IdentityContext } from '../context.js';
import type { RegistryFacts } from './registry.js';

export const TOKEN_PATH = '/oauth/token';
/** The authorization endpoint: published because clients require one (RFC 8414 lists it); it refuses every request. */
export const AUTHORIZE_PATH = '/oauth/authorize';
export const INTROSPECT_PATH = '/oauth/introspect';
export const REVOKE_PATH = '/oauth/revoke';
export const JWKS_PATH = '/.well-known/jwks.json';
export const METADATA_PATH = '/.well-known/oauth-authorization-server';

/** RFC 8693 3 token type identifiers, RFC 7523 2.2 assertion type, grant types. */
export const TOKEN_TYPE = {
  jwt: 'urn:ietf:params:oauth:token-type:jwt',
  accessToken: 'urn:ietf:params:oauth:token-type:access_token',
  idToken: 'urn:ietf:params:oauth:token-type:id_token',
} as const;
export const JWT_BEARER_ASSERTION = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';
export const GRANT = { exchange: 'urn:ietf:params:oauth:grant-type:token-exchange', clientCredentials: 'client_credentials' } as const;

/**
 * The `client_id` of a token an enforcement point exchanged for an upstream (onward.ts): never an
 * agent's name, so no enforcement point takes such a token as an agent's credential.
 */
export const GATEWAY_CLIENT_ID = `${BRAND}-gateway`;

/** The revocation list an access token's revocation is written to (identity_revocations.list). */
export const OAUTH_LIST = 'oauth';

export interface OAuthContext {
  id: IdentityContext;
  /** The authorization server's issuer identifier (RFC 8414 2): IDP_PUBLIC_URL. */
  issuer: string;
  tokenEndpoint: string;
  /** IDP_TOKEN_TTL_SECONDS: the longest an access token lives. */
  tokenTtlSeconds: number;
  /** The registry, once known (the all-in-one wires its control plane's after start). */
  registry(): RegistryFacts | undefined;
  /** Whether `authorization` is an enforcement point's credential (identity:verify; always, with WRIT_API_AUTH off): onward.ts. */
  enforcementPoint(authorization: string | undefined): Promise<boolean>;
  /** Workforce OIDC (OIDC_*), for subject tokens of humans. */
  oidc?: OidcVerifier;
}

export const nowSec = (o: OAuthContext) => Math.floor(o.id.now() / 1000);
