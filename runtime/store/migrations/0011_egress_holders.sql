-- Egress approval holders (issue 16, item 5): each approval queue process renews a heartbeat
-- row under a per-process instance id. A pending request whose holder instance has no live
-- heartbeat lost its connection with its process: any queue expires it (and records the
-- proxy's `egress.proxy` denial for it), and approving it is refused instead of answering
-- `approved` while nothing can be forwarded.
create table if not exists egress_holders (
  instance text primary key,
  replica text not null,
  expires_at timestamptz not null
);
alter table egress_requests add column if not exists holder_instance text;
