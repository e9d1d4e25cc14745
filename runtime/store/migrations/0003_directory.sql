-- Workforce directory (SPEC 2.7), synced from SCIM snapshots. Every row carries tenant_id.
create table if not exists directory_employees (
  employee_subject text primary key,
  tenant_id text not null,
  idp text not null,
  external_id text not null,
  external_idp_id text,
  email text,
  display_name text,
  given_name text,
  family_name text,
  title text,
  department text,
  manager_subject text,
  groups jsonb not null default '[]',
  roles jsonb not null default '[]',
  app_assignments jsonb not null default '[]',
  status text not null check (status in ('active', 'inactive')),
  source text not null default 'scim',
  session jsonb,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  deactivated_at timestamptz,
  last_synced_at timestamptz,
  -- Digest of the snapshot-owned columns, written by the sync: an unchanged re-sync compares
  -- digests instead of loading and parsing every column (null = compare as changed).
  sync_hash text
);
create index if not exists directory_employees_tenant on directory_employees (tenant_id, status);
create index if not exists directory_employees_email on directory_employees (tenant_id, lower(email));

create table if not exists directory_groups (
  group_key text primary key,
  tenant_id text not null,
  external_id text not null,
  display_name text,
  members jsonb not null default '[]',
  created_at timestamptz not null,
  updated_at timestamptz not null,
  last_synced_at timestamptz
);
create index if not exists directory_groups_tenant on directory_groups (tenant_id);

create table if not exists directory_sync_runs (
  id text primary key,
  seq bigserial,
  tenant_id text not null,
  idp text not null,
  started_at timestamptz not null,
  finished_at timestamptz,
  status text not null,
  counts jsonb not null,
  errors jsonb not null default '[]',
  conflicts jsonb not null default '[]',
  cascade jsonb
);
create index if not exists directory_sync_runs_tenant on directory_sync_runs (tenant_id, seq desc);
