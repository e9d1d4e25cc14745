/** The egress approval request as served (SPEC 2.4) and the pure helpers around it. */
import { createHash } from 'node:crypto';
import { ApiError } from '../../lib/errors.js';
import { EGRESS_STATUSES, type EgressStatus, type egressRequests } from '../../store/schema/egress.js';

export { EGRESS_STATUSES, type EgressStatus };
/** How a hold ends; `released`: this process stopped holding it, the request stays pending. */
export type HoldResult = Exclude<EgressStatus, 'pending'> | 'released';

/** SPEC 2.4, plus `denyReason` (why a human denied, or why it expired) and `expiresAt` (hold deadline). */
export interface EgressRequest {
  id: string;
  status: EgressStatus;
  actor: string;
  actorDid: string;
  target: string;
  /** `external` or a registry name. */
  service: string;
  action: string;
  resource: string;
  reason: string;
  requestedAt: string;
  expiresAt: string;
  approver: string | null;
  decidedAt: string | null;
  denyReason: string | null;
  /** A connection is waiting on it (false after its process stopped: the agent's retry picks it up). */
  held: boolean;
  /** When the decision reached the agent; null while a decision waits for the agent's retry. */
  usedAt: string | null;
  /**
   * SHA-256 (base64url) of exactly what is held: id, actor, actor DID, target, service, action,
   * resource and when it was asked. An approval that names it can only release this request.
   */
  digest: string;
}

/** The digest of a held request (see EgressRequest.digest). */
export function requestDigest(r: Pick<EgressRequest, 'id' | 'actor' | 'actorDid' | 'target' | 'service' | 'action' | 'resource' | 'requestedAt'>): string {
  const canonical = JSON.stringify([r.id, r.actor, r.actorDid, r.target, r.service, r.action, r.resource, r.requestedAt]);
  return createHash('sha256').update(canonical).digest('base64url');
}

/** What the proxy hands to `create`. */
export interface EgressRequestInput {
  actor: string;
  actorDid?: string;
  /** `host:port`. */
  target: string;
  service: string;
  action?: string;
  resource?: string;
  reason?: string;
}

/** SPEC 8 `ApprovalTimeout`. */
/** The longest field an approver is shown (longer free text is clipped; a longer URL is not held). */
export const FIELD_MAX = 4096;

/** Timestamps come back as `2026-01-01 10:00:00.123+00` (either engine); serve RFC 3339. */
export function iso(v: string | null): string | null {
  if (v === null) return null;
  const t = Date.parse(v);
  return Number.isNaN(t) ? v : new Date(t).toISOString();
}

export function toRecord(row: typeof egressRequests.$inferSelect): EgressRequest {
  const rec: Omit<EgressRequest, 'digest'> = {
    id: row.id,
    status: row.status,
    actor: row.actor,
    actorDid: row.actorDid,
    target: row.target,
    service: row.service,
    action: row.action,
    resource: row.resource,
    reason: row.reason,
    requestedAt: iso(row.requestedAt) ?? row.requestedAt,
    expiresAt: iso(row.expiresAt) ?? row.expiresAt,
    approver: row.approver,
    decidedAt: iso(row.decidedAt),
    denyReason: row.denyReason,
    held: row.holderInstance !== null,
    usedAt: iso(row.usedAt),
  };
  return { ...rec, digest: requestDigest(rec) };
}

/**
 * The fields of a request to hold, as stored. An approval releases exactly what was shown: an
 * action or resource too long to show in full is refused (400), other fields are clipped.
 */
export function heldFields(input: EgressRequestInput) {
  for (const [k, x] of [
    ['action', input.action],
    ['resource', input.resource],
  ] as const) {
    if ((x?.length ?? 0) > FIELD_MAX)
      throw new ApiError(400, 'too_long', `the request's ${k} is longer than ${FIELD_MAX} characters: too long to show an approver`);
  }
  return {
    actor: clip(input.actor),
    actorDid: clip(input.actorDid),
    target: clip(input.target),
    service: clip(input.service),
    action: clip(input.action),
    resource: clip(input.resource),
  };
}

/** Long free-text fields (URLs) are informational: cap them instead of refusing the request. */
export function clip(s: string | undefined): string {
  const v = (s ?? '').replace(/[\r\n]+/g, ' ');
  return v.length > FIELD_MAX ? v.slice(0, FIELD_MAX - 1) + '…' : v;
}

export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
