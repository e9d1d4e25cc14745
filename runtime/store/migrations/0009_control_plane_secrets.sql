-- Secrets the control-plane replicas of one database share (created once, by whichever replica
-- starts first): the call-ticket key the forward proxy signs its upstream hop with, so the next
-- hop's /authz (proxy -> broker -> /authz) knows the call was already counted.
create table if not exists control_plane_secrets (
  name text primary key,
  value text not null,
  created_at timestamptz not null default now()
);
