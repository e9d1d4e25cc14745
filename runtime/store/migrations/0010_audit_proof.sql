-- Audit proof (issue 16): signed checkpoints, the control plane's audit signing key, and the
-- writer leases that keep two processes off one chain.
--
-- audit_checkpoints: one signed statement `{chainId, seq, hash, time}` (a compact JWS, EdDSA)
-- per row. `prune` marks the checkpoint taken at a retention boundary: rows up to its seq were
-- deleted on purpose and it anchors verification of what remains.
create table if not exists audit_checkpoints (
  chain text not null,
  seq bigint not null,
  hash text not null,
  time text not null,
  jws text not null,
  kid text not null,
  prune boolean not null default false,
  primary key (chain, seq)
);

-- The Ed25519 key the control plane signs checkpoints with (one row, id 'audit'). The private
-- key is sealed (AES-256-GCM, scrypt) when AUDIT_KEY_ENCRYPTION_KEY is set, as the identity
-- authority's issuer key is.
create table if not exists audit_keys (
  id text primary key,
  kid text not null,
  public_jwk jsonb not null,
  private_key text not null,
  salt text,
  enc text not null default 'none',
  created_at timestamptz not null default now()
);

-- One live writer per chain: a lease renewed by its holder; a start finding a live lease of
-- someone else refuses (an explicit AUDIT_CHAIN_ID) or takes the next free default id.
create table if not exists audit_leases (
  chain text primary key,
  owner text not null,
  expires_at timestamptz not null
);
