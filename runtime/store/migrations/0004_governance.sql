-- Governance (SPEC 2.8, 2.9, 3.1, 3.4): governed agents, authority delegations and the
-- revocation log. Every row carries tenant_id; the repositories bind one tenant per instance.
create table if not exists governance_agents (
  agent_name text primary key,
  seq bigserial,
  tenant_id text not null,
  owner_type text not null check (owner_type in ('employee', 'team', 'service_account_owner_group')),
  owner_ref text not null,
  team_ref text,
  business_sponsor text,
  risk_tier text check (risk_tier in ('low', 'medium', 'high', 'critical')),
  approved_runtime text,
  status text not null check (status in ('draft', 'pending_approval', 'approved', 'active', 'suspended', 'quarantined', 'retired')),
  created_by text,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  last_reviewed_at timestamptz,
  history jsonb not null default '[]'
);
create index if not exists governance_agents_tenant on governance_agents (tenant_id, status);

create table if not exists governance_delegations (
  delegation_id text primary key,
  seq bigserial,
  tenant_id text not null,
  agent_id text not null,
  granted_by text not null,
  requester_ref text,
  task_id text,
  task_description text,
  action text not null,
  resource text not null,
  resource_type text,
  required_group text,
  status text not null check (status in ('pending', 'approved', 'active', 'revoked', 'expired', 'superseded', 'invalidated')),
  vc_status text not null check (vc_status in ('valid', 'revoked', 'expired', 'superseded')),
  break_glass boolean not null default false,
  authority_basis text not null,
  authority_evidence jsonb not null,
  policy_decision jsonb not null,
  expires_at bigint,
  created_at timestamptz not null,
  approved_at timestamptz,
  revoked_at timestamptz,
  revocation_reason text,
  history jsonb not null default '[]'
);
create index if not exists governance_delegations_tenant on governance_delegations (tenant_id, seq desc);
create index if not exists governance_delegations_agent on governance_delegations (tenant_id, agent_id, status);

create table if not exists governance_revocation_log (
  id text primary key,
  seq bigserial,
  tenant_id text not null,
  kind text not null check (kind in ('agent_suspend', 'agent_quarantine', 'delegation_revoke', 'delegation_invalidate', 'delegation_expire', 'vc_revoke')),
  reason_code text not null,
  agent_id text,
  delegation_id text,
  source text not null check (source in ('auto', 'admin')),
  by text not null,
  detail text,
  at timestamptz not null
);
create index if not exists governance_revocation_log_tenant on governance_revocation_log (tenant_id, seq desc);
