-- Identity authority (SPEC 2.5, 2.6, 4.4): issuer key, agents, issued credentials, task-scoped
-- delegations, revocations. Every row carries tenant_id (the agent API is single-tenant today:
-- 'default').
create table if not exists identity_issuer_keys (
  id text primary key,
  public_key text not null,
  private_key text not null,
  enc text not null check (enc in ('none', 'aes-256-gcm')),
  salt text,
  created_at timestamptz not null default now()
);

create table if not exists identity_agents (
  tenant_id text not null default 'default',
  name text not null,
  role text not null,
  capabilities jsonb not null default '[]',
  did text,
  public_key text,
  membership_jti text,
  membership_exp bigint,
  provisioned_at timestamptz,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  primary key (tenant_id, name)
);
create unique index if not exists identity_agents_did on identity_agents (did);

create table if not exists identity_credentials (
  jti text primary key,
  tenant_id text not null default 'default',
  kind text not null check (kind in ('membership', 'capability', 'delegation')),
  subject_did text not null,
  agent_name text not null,
  delegation_id text,
  issued_at timestamptz not null,
  exp bigint not null
);
create index if not exists identity_credentials_agent on identity_credentials (tenant_id, agent_name);

create table if not exists identity_delegations (
  id text primary key,
  seq bigserial,
  tenant_id text not null default 'default',
  status text not null check (status in ('pending', 'approved', 'denied')),
  actor_name text not null,
  actor_did text,
  task text not null,
  action text not null,
  resource text not null,
  reason text not null,
  ttl_seconds integer not null,
  requested_at timestamptz not null,
  approver text,
  approved_at timestamptz,
  denied_at timestamptz,
  deny_reason text,
  vc_jti text,
  vc text,
  not_after bigint
);
create index if not exists identity_delegations_lookup on identity_delegations (tenant_id, actor_name, task, action, status);
create index if not exists identity_delegations_seq on identity_delegations (tenant_id, seq desc);

create table if not exists identity_revocations (
  jti text primary key,
  seq bigserial,
  tenant_id text not null default 'default',
  list text not null default 'default',
  revoked_at timestamptz not null
);
create index if not exists identity_revocations_list on identity_revocations (list, seq);
