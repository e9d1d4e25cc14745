/**
 * Tenant scoping shared by the enterprise repositories (DESIGN principle 5). A repository is
 * built for ONE tenant and every statement it issues carries `tenant_id = <that tenant>`, so a
 * cross-tenant read cannot be expressed through it. Keys that embed the tenant (employee subjects
 * `<idp>:<tenant>:<ext>`, group keys `<tenant>:<ext>`) are also checked against the scope.
 */
import type { Db } from '../../store/factory.js';

/** A drizzle database or a transaction of one (both expose the same query builder). */
export type DbOrTx = Db | Parameters<Parameters<Db['transaction']>[0]>[0];

const TENANT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Tenant ids become part of subjects and group keys, so ':' and whitespace are refused. */
export function isTenantId(s: string): boolean {
  return TENANT_ID.test(s);
}

/** Tenant embedded in an employee subject `<idp>:<tenant>:<external_id>` (external ids may hold ':'). */
export function tenantOfSubject(subject: string): string | undefined {
  const parts = subject.split(':');
  return parts.length >= 3 ? parts[1] : undefined;
}

/** Tenant embedded in a group key `<tenant>:<external_id>`. */
export function tenantOfGroupKey(key: string): string | undefined {
  const i = key.indexOf(':');
  return i > 0 ? key.slice(0, i) : undefined;
}

export const employeeSubject = (idp: string, tenantId: string, externalId: string): string => `${idp}:${tenantId}:${externalId}`;
export const groupKey = (tenantId: string, externalId: string): string => `${tenantId}:${externalId}`;
