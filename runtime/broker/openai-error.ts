/**
 * OpenAI-style error bodies `{error:{message,type,param,code}}`: what every OpenAI SDK parses
 * into its APIError classes. Pure. Messages are built here, never from a stack trace.
 */

export interface OpenAIError {
  status: number;
  type: string;
  code: string;
  message: string;
  /** Extra response headers (retry-after, x-should-retry, needs-approval). */
  headers?: Record<string, string>;
}

export interface ErrorBody {
  error: { message: string; type: string; param: null; code: string };
}

export function errorBody(e: OpenAIError): ErrorBody {
  return { error: { message: e.message, type: e.type, param: null, code: e.code } };
}

/** `x-should-retry: false` tells the OpenAI SDKs not to retry an error a retry cannot fix. */
const NO_RETRY = { 'x-should-retry': 'false' };

export const invalidRequest = (message: string, code = 'invalid_request'): OpenAIError => ({
  status: 400,
  type: 'invalid_request_error',
  code,
  message,
  headers: NO_RETRY,
});

export const missingActor = (headerName: string): OpenAIError => ({
  status: 401,
  type: 'authentication_error',
  code: 'missing_actor',
  message: `missing ${headerName} header: the broker needs the name of the calling agent`,
  headers: NO_RETRY,
});

export const modelNotFound = (model: string): OpenAIError => ({
  status: 404,
  type: 'invalid_request_error',
  code: 'model_not_found',
  message: `The model ${JSON.stringify(model)} does not exist or is not served by this broker`,
  headers: NO_RETRY,
});

export const notFound = (method: string, path: string): OpenAIError => ({
  status: 404,
  type: 'invalid_request_error',
  code: 'not_found',
  message: `no route for ${method} ${path}`,
  headers: NO_RETRY,
});

export const methodNotAllowed = (method: string, path: string, allow: string): OpenAIError => ({
  status: 405,
  type: 'invalid_request_error',
  code: 'method_not_allowed',
  message: `${method} is not allowed on ${path}`,
  headers: { ...NO_RETRY, allow },
});

export const bodyTooLarge = (limit: number): OpenAIError => ({
  status: 413,
  type: 'invalid_request_error',
  code: 'request_too_large',
  message: `request body exceeds ${limit} bytes`,
  headers: { ...NO_RETRY, connection: 'close' },
});

export const denied = (status: 401 | 403, reason: string, extra: Record<string, string> = {}): OpenAIError => ({
  status,
  type: status === 401 ? 'authentication_error' : 'permission_error',
  code: status === 401 ? 'unauthenticated' : 'permission_denied',
  message: `denied by policy: ${reason}`,
  headers: { ...NO_RETRY, ...extra },
});

/** The decision engine could not answer: the request is refused (fail closed) and may be retried. */
export const decisionUnavailable = (why: string): OpenAIError => ({
  status: 503,
  type: 'service_unavailable',
  code: 'decision_unavailable',
  message: `authorization decision unavailable (${why}); request refused`,
});

export const shuttingDown = (): OpenAIError => ({
  status: 503,
  type: 'service_unavailable',
  code: 'shutting_down',
  message: 'the broker is shutting down',
});

/**
 * The agent's budget cannot cover the call's worst case: refused before any provider call.
 * `insufficient_quota` is OpenAI's own type for a spent quota; the SDKs do not retry it.
 */
export const budgetExceeded = (message: string, retryAfterSeconds?: number): OpenAIError => ({
  status: 429,
  type: 'insufficient_quota',
  code: 'budget_exceeded',
  message,
  // No retry-after when the call never fits (more than the whole budget).
  headers: retryAfterSeconds === undefined ? NO_RETRY : { ...NO_RETRY, 'retry-after': String(retryAfterSeconds) },
});

/** The budget reservation could not be made (control plane or its ledger down): refused, fail closed. */
export const budgetUnavailable = (why: string): OpenAIError => ({
  status: 503,
  type: 'service_unavailable',
  code: 'budget_unavailable',
  message: `budget reservation unavailable (${why}); request refused`,
});

/** The body of the final SSE event of a stream cut at the agent's budget (the SDKs raise it). */
export const streamBudgetCut = (allowance: number): ErrorBody => ({
  error: {
    message: `stream stopped at the agent's budget: its output allowance of ${allowance} tokens is used up`,
    type: 'insufficient_quota',
    param: null,
    code: 'budget_exceeded',
  },
});

/** The body of the final SSE event of a stream whose provider sent one event over the broker's bound. */
export const streamEventTooLarge = (maxChars: number): ErrorBody =>
  errorBody(upstreamFailed(`the model provider sent a stream event larger than ${maxChars} characters; stream stopped`));

/** The body of the final SSE event of a stream whose provider sent an event that is not a JSON object (nor `[DONE]`). */
export const streamEventMalformed = (): ErrorBody =>
  errorBody(upstreamFailed('the model provider sent a stream event that is not a JSON object; stream stopped'));

/** The body of the final SSE event of a stream whose provider ended it without `data: [DONE]`. */
export const streamUnfinished = (): ErrorBody => errorBody(upstreamFailed('the model provider ended the stream without data: [DONE]; stream stopped'));

/** The body of the final SSE event of a stream whose provider broke off (reset, closed mid-event). */
export const streamBroken = (why: string): ErrorBody => errorBody(upstreamFailed(`the model provider's stream broke off (${why}); stream stopped`));

/** The body of the final SSE event of a stream whose provider sent nothing for the gap timeout. */
export const streamStalled = (ms: number): ErrorBody =>
  errorBody({ ...upstreamTimeout(ms), message: `the model provider sent nothing for ${ms} ms; stream stopped` });

/** The body of the final SSE event of a stream still running at the broker's whole-stream deadline. */
export const streamDeadline = (ms: number): ErrorBody =>
  errorBody({ status: 504, type: 'timeout_error', code: 'stream_timeout', message: `the stream ran past the broker's limit of ${ms} ms; stream stopped` });

/** The upstream did not answer (or stalled between chunks) within the broker's timeout. */
export const upstreamTimeout = (ms: number): OpenAIError => ({
  status: 504,
  type: 'timeout_error',
  code: 'upstream_timeout',
  message: `the model provider did not answer within ${ms} ms`,
});

/** Connection refused, reset or DNS failure on the way to the provider. */
export const upstreamUnreachable = (why: string): OpenAIError => ({
  status: 502,
  type: 'api_error',
  code: 'upstream_unreachable',
  message: `the model provider could not be reached (${why})`,
});

/** The provider refused the broker's own key: a broker configuration problem, not the caller's. */
export const upstreamAuth = (status: number, keyVar: string, placeholder: boolean): OpenAIError => ({
  status: 502,
  type: 'api_error',
  code: 'upstream_auth_failed',
  message: placeholder
    ? `the model provider rejected the broker's provider key (${status}): no key is configured, set ${keyVar}`
    : `the model provider rejected the broker's provider key (${status}); check ${keyVar}`,
  headers: NO_RETRY,
});

/** An upstream 5xx or a malformed upstream answer. */
export const upstreamFailed = (message: string): OpenAIError => ({
  status: 502,
  type: 'api_error',
  code: 'upstream_error',
  message,
});

/** An upstream 4xx (other than auth) passed through with the provider's own message. */
export const upstreamRejected = (status: number, type: string, code: string, message: string, extra: Record<string, string> = {}): OpenAIError => ({
  status,
  type,
  code,
  message,
  headers: extra,
});
