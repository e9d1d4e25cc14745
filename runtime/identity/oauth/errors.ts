/**
 * OAuth 2.0 error answers (RFC 6749 5.2 and 4.1.2.1, RFC 8693 2.2.2, RFC 8707 2, RFC 7009 2.2.1): a JSON body
 * `{error, error_description}` with `Cache-Control: no-store`. Every refusal of the token,
 * introspection and revocation endpoints is an OAuthError thrown by the pure code and answered by
 * `oauthErrorResponse`; nothing else reaches the client from those routes.
 */
export type OAuthErrorCode =
  | 'invalid_request'
  | 'invalid_client'
  | 'invalid_grant'
  | 'unauthorized_client'
  | 'unsupported_grant_type'
  | 'invalid_scope'
  | 'invalid_target'
  | 'unsupported_token_type'
  | 'unsupported_response_type'
  | 'temporarily_unavailable';

export class OAuthError extends Error {
  constructor(
    readonly code: OAuthErrorCode,
    readonly description: string,
    readonly status: 400 | 401 | 503 = code === 'invalid_client' ? 401 : code === 'temporarily_unavailable' ? 503 : 400,
  ) {
    super(description);
  }
}

export const invalidRequest = (d: string) => new OAuthError('invalid_request', d);
export const invalidGrant = (d: string) => new OAuthError('invalid_grant', d);
export const invalidTarget = (d: string) => new OAuthError('invalid_target', d);
export const invalidScope = (d: string) => new OAuthError('invalid_scope', d);
export const invalidClient = (d: string) => new OAuthError('invalid_client', d);

/** Headers every token-endpoint answer carries (RFC 6749 5.1). */
export const NO_STORE = { 'cache-control': 'no-store', pragma: 'no-cache' } as const;

export function oauthErrorResponse(e: OAuthError): Response {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...NO_STORE };
  // RFC 6749 5.2: a 401 names the authentication scheme the client may use.
  if (e.status === 401) headers['www-authenticate'] = 'Bearer error="invalid_client"';
  // A description is printable ASCII without `"` or `\` (RFC 6749 5.2).
  const description = e.description.replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/g, "'");
  return new Response(JSON.stringify({ error: e.code, error_description: description }), { status: e.status, headers });
}
