-- Access tokens issued by the identity authority's OAuth 2.0 token endpoint (runtime/identity/
-- oauth/, issue 43): one row per token, never its value. The revocation of a token is a row of
-- identity_revocations (list `oauth`), so it reaches every enforcement point through the same
-- revocation feed as a delegation VC's. delegation_jti is the delegation VC the token derives
-- from (null for client_credentials tokens).
create table if not exists oauth_tokens (
  jti text primary key,
  tenant_id text not null default 'default',
  grant_type text not null,
  agent_name text not null,
  agent_did text not null,
  subject text not null,
  audience text not null,
  scope text not null default '',
  delegation_id text,
  delegation_jti text,
  issued_at timestamptz not null,
  exp bigint not null
);
create index if not exists oauth_tokens_agent on oauth_tokens (tenant_id, agent_name, issued_at);
create index if not exists oauth_tokens_delegation on oauth_tokens (delegation_id) where delegation_id is not null;
