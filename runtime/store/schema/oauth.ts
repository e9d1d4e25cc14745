/** Drizzle view of the OAuth tables (migrations 0025_oauth_tokens, 0026_oauth_assertions). */
import { bigint, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

export const oauthTokens = pgTable('oauth_tokens', {
  jti: text('jti').primaryKey(),
  tenantId: text('tenant_id').notNull().default('default'),
  grantType: text('grant_type').notNull(),
  agentName: text('agent_name').notNull(),
  agentDid: text('agent_did').notNull(),
  subject: text('subject').notNull(),
  audience: text('audience').notNull(),
  scope: text('scope').notNull().default(''),
  delegationId: text('delegation_id'),
  delegationJti: text('delegation_jti'),
  issuedAt: timestamp('issued_at', { withTimezone: true, mode: 'string' }).notNull(),
  exp: bigint('exp', { mode: 'number' }).notNull(),
});

export const oauthAssertionJtis = pgTable(
  'oauth_assertion_jtis',
  {
    tenantId: text('tenant_id').notNull().default('default'),
    agentName: text('agent_name').notNull(),
    jti: text('jti').notNull(),
    exp: bigint('exp', { mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.tenantId, t.agentName, t.jti] })],
);
