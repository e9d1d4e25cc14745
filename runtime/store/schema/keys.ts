/** Drizzle view of the API-key tables (migration 0005_identity_keys). */
import { bigserial, index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'string' });

export const apiKeys = pgTable(
  'api_keys',
  {
    id: text('id').primaryKey(),
    seq: bigserial('seq', { mode: 'number' }),
    tenantId: text('tenant_id'),
    name: text('name').notNull(),
    env: text('env').$type<'live' | 'test'>().notNull(),
    prefix: text('prefix').notNull(),
    last4: text('last4').notNull(),
    /** Per-key random salt (base64url). */
    salt: text('salt').notNull(),
    /** HMAC-SHA-256(pepper, salt || secret), base64url. Never leaves the store layer. */
    hash: text('hash').notNull(),
    scopes: jsonb('scopes').$type<string[]>().notNull(),
    status: text('status').$type<'active' | 'rotated' | 'revoked'>().notNull(),
    createdBy: text('created_by'),
    createdAt: ts('created_at').notNull(),
    lastUsedAt: ts('last_used_at'),
    revokedAt: ts('revoked_at'),
    revokedBy: text('revoked_by'),
    rotatedAt: ts('rotated_at'),
    rotatedFrom: text('rotated_from'),
  },
  (t) => [index('api_keys_tenant').on(t.tenantId, t.seq)],
);

export const apiKeyPepper = pgTable('api_key_pepper', {
  id: text('id').primaryKey(),
  pepper: text('pepper').notNull(),
  createdAt: ts('created_at').notNull().defaultNow(),
});
