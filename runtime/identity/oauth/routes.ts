/**
 * The authorization server's routes on the identity authority (`:8090`): RFC 8414 metadata, the
 * JWKS, the token endpoint (RFC 8693 exchange, client_credentials), RFC 7662 introspection and
 * RFC 7009 revocation. The POST routes take form bodies and answer OAuth's JSON shapes (errors:
 * RFC 6749 5.2), never the management API's envelope.
 */
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { subApi } from '../../lib/api.js';
import { errMsg, logger } from '../../lib/log.js';
import { json } from '../schemas.js';
import { introspect, revoke } from './lifecycle.js';
import { NO_STORE, OAuthError, oauthErrorResponse } from './errors.js';
import { parseForm } from './form.js';
import { clientCredentials, tokenExchange } from './grants.js';
import { isOnward, onwardExchange } from './onward.js';
import {
  AUTHORIZE_PATH,
  GRANT,
  INTROSPECT_PATH,
  JWKS_PATH,
  JWT_BEARER_ASSERTION,
  METADATA_PATH,
  REVOKE_PATH,
  TOKEN_PATH,
  TOKEN_TYPE,
  type OAuthContext,
} from './context.js';
import { issuerJwk } from './token.js';
import { tokenListRoutes } from './tokens-list.js';

const log = logger('identity.oauth');

/** RFC 8414 2: what a client discovers. */
export function metadataOf(o: OAuthContext) {
  return {
    issuer: o.issuer,
    // No interactive grant is served, but MCP clients (the official SDK's metadata schema) require
    // the field: the endpoint exists and refuses (authorizeRefusal).
    authorization_endpoint: `${o.issuer}${AUTHORIZE_PATH}`,
    token_endpoint: o.tokenEndpoint,
    jwks_uri: `${o.issuer}${JWKS_PATH}`,
    introspection_endpoint: `${o.issuer}${INTROSPECT_PATH}`,
    revocation_endpoint: `${o.issuer}${REVOKE_PATH}`,
    grant_types_supported: [GRANT.exchange, GRANT.clientCredentials],
    token_endpoint_auth_methods_supported: ['private_key_jwt', 'none'],
    token_endpoint_auth_signing_alg_values_supported: ['EdDSA', 'Ed25519'],
    introspection_endpoint_auth_methods_supported: ['bearer'],
    revocation_endpoint_auth_methods_supported: ['none'],
    response_types_supported: [],
    scopes_supported: [],
    client_assertion_types_supported: [JWT_BEARER_ASSERTION],
    subject_token_types_supported: [TOKEN_TYPE.jwt, TOKEN_TYPE.idToken, TOKEN_TYPE.accessToken],
    actor_token_types_supported: [TOKEN_TYPE.jwt, TOKEN_TYPE.accessToken],
  };
}

/**
 * The authorization endpoint's one answer. No client has a redirect URI registered here, so no
 * request can be redirected back with an error: it is told to the caller (RFC 6749 4.1.2.1), as
 * `unsupported_response_type`, saying where tokens are had instead.
 */
export const authorizeRefusal = (o: OAuthContext): OAuthError =>
  new OAuthError(
    'unsupported_response_type',
    `no interactive authorization here: agents get tokens at ${o.tokenEndpoint} (token exchange, RFC 8693, for a human's delegation; client_credentials with private_key_jwt, RFC 7523)`,
  );

const oauthJson = (description: string) => json(z.record(z.string(), z.unknown()), description);

/** Reads the form and runs `handle`; any OAuthError is the RFC 6749 5.2 answer. */
async function formRoute(c: Context, handle: (form: Map<string, string>, c: Context) => Promise<unknown>): Promise<Response> {
  try {
    const form = parseForm(c.req.header('content-type'), await c.req.text());
    return new Response(JSON.stringify(await handle(form, c)), { status: 200, headers: { 'content-type': 'application/json', ...NO_STORE } });
  } catch (e) {
    if (e instanceof OAuthError) return oauthErrorResponse(e);
    throw e;
  }
}

async function tokenRequest(o: OAuthContext, form: Map<string, string>, authorization: string | undefined) {
  const grant = form.get('grant_type');
  if (grant === GRANT.exchange) return isOnward(form) ? onwardExchange(o, form, authorization) : tokenExchange(o, form);
  if (grant === GRANT.clientCredentials) return clientCredentials(o, form);
  throw new OAuthError('unsupported_grant_type', grant === undefined ? 'missing parameter grant_type' : `grant_type ${grant} is not supported`);
}

export function oauthRoutes(o: OAuthContext): OpenAPIHono {
  const app = subApi();
  app.openapi(
    createRoute({
      method: 'get',
      path: METADATA_PATH,
      tags: ['oauth'],
      summary: 'RFC 8414 authorization server metadata',
      responses: { 200: oauthJson('Metadata') },
    }),
    (c) => c.json(metadataOf(o), 200),
  );
  app.openapi(
    createRoute({
      method: 'get',
      path: JWKS_PATH,
      tags: ['oauth'],
      summary: 'The access-token signing key (the issuer key, RFC 8037 OKP)',
      responses: { 200: oauthJson('JWK set') },
    }),
    (c) => c.json({ keys: [issuerJwk(o.id.issuer())] }, 200),
  );
  for (const method of ['get', 'post'] as const)
    app.openapi(
      createRoute({
        method,
        path: AUTHORIZE_PATH,
        tags: ['oauth'],
        summary: 'Authorization endpoint (RFC 6749 3.1): refuses every request with unsupported_response_type; tokens come from the token endpoint',
        responses: { 400: oauthJson('RFC 6749 4.1.2.1 error') },
      }),
      (() => oauthErrorResponse(authorizeRefusal(o))) as never,
    );
  const post = (path: string, summary: string, handle: (form: Map<string, string>, c: Context) => Promise<unknown>) =>
    app.openapi(
      createRoute({
        method: 'post',
        path,
        tags: ['oauth'],
        summary: `${summary}. Body: application/x-www-form-urlencoded parameters`,
        responses: { 200: oauthJson('OAuth answer'), 400: oauthJson('RFC 6749 5.2 error'), 401: oauthJson('invalid_client') },
      }),
      ((c: Context) => formRoute(c, handle)) as never,
    );
  post(TOKEN_PATH, 'Token endpoint: RFC 8693 token exchange, client_credentials with private_key_jwt (RFC 7523)', async (form, c) => {
    const answer = await tokenRequest(o, form, c.req.header('authorization'));
    log.info('access token issued', { grant: form.get('grant_type'), audience: form.get('audience') ?? form.get('resource') });
    return answer;
  });
  post(INTROSPECT_PATH, 'RFC 7662 introspection (identity:verify)', (form) => introspect(o, form));
  post(REVOKE_PATH, 'RFC 7009 revocation of an access token issued here (possession suffices: revoking only takes access away)', async (form) => {
    await revoke(o, form).catch((e: unknown) => {
      if (e instanceof OAuthError) throw e;
      log.error('token revocation failed', { err: errMsg(e) });
      throw new OAuthError('temporarily_unavailable', 'revocation could not be recorded');
    });
    return {};
  });
  app.route('/', tokenListRoutes(o));
  return app;
}
