-- Control plane: registry services (SPEC 2.1) and the durable audit chain (SPEC 2.3).
-- The registry document is the normalized service as served; `rev` increments on every upsert so
-- replicas refreshing through LISTEN/NOTIFY never apply an older version over a newer one.
create table if not exists registry_services (
  name text primary key,
  doc jsonb not null,
  rev bigint not null default 1,
  registered_at timestamptz not null,
  updated_at timestamptz not null
);

-- Audit records, keyed by (chain, seq): each control-plane replica appends to its own chain id,
-- so replicas sharing one database never collide. `time` is the exact RFC 3339 string that was
-- hashed (text, not timestamptz, so the hash recomputes byte-for-byte after a restart).
create table if not exists audit_log (
  chain text not null,
  seq bigint not null,
  time text not null,
  action text not null,
  subject text,
  actor text,
  task text,
  service text,
  allow boolean not null,
  reason text not null,
  rule text,
  delegation_id text,
  delegation_exp double precision,
  prev_hash text not null,
  hash text not null,
  stored_at timestamptz not null default now(),
  primary key (chain, seq)
);
create index if not exists audit_log_service on audit_log (service, chain, seq);
