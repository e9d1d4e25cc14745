-- API keys (SPEC 2.10, 4.5). Only a salted hash of the secret is stored: HMAC-SHA-256 keyed by a
-- server pepper over (per-key salt || secret). The plaintext is returned once and never stored.
create table if not exists api_keys (
  id text primary key,
  seq bigserial,
  tenant_id text,
  name text not null,
  env text not null check (env in ('live', 'test')),
  prefix text not null,
  last4 text not null,
  salt text not null,
  hash text not null,
  scopes jsonb not null default '[]',
  status text not null check (status in ('active', 'rotated', 'revoked')),
  created_by text,
  created_at timestamptz not null,
  last_used_at timestamptz,
  revoked_at timestamptz,
  revoked_by text,
  rotated_at timestamptz,
  rotated_from text
);
create index if not exists api_keys_tenant on api_keys (tenant_id, seq desc);

-- Development fallback for the hashing pepper when IDP_API_KEY_PEPPER is unset (one row).
create table if not exists api_key_pepper (
  id text primary key,
  pepper text not null,
  created_at timestamptz not null default now()
);
