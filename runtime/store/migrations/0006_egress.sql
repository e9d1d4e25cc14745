-- Egress approval queue (SPEC 2.4, 3.2): requests the forward proxy holds for a human decision.
-- `seq` orders the list newest first without relying on clock ties. `holder` is the replica that
-- holds the client connection (a restarted replica expires its own leftovers); `expires_at` is the
-- hold deadline, after which any replica may expire the row (its connection is gone for sure).
-- Every status change is a guarded `update ... where status = 'pending'`, so one decision wins.
create table if not exists egress_requests (
  id text primary key,
  seq bigserial not null,
  status text not null default 'pending' check (status in ('pending', 'approved', 'denied', 'expired')),
  actor text not null,
  actor_did text not null default '',
  target text not null,
  service text not null,
  action text not null default '',
  resource text not null default '',
  reason text not null default '',
  requested_at timestamptz not null,
  expires_at timestamptz not null,
  holder text not null,
  approver text,
  decided_at timestamptz,
  deny_reason text
);
create index if not exists egress_requests_seq on egress_requests (seq);
create index if not exists egress_requests_status on egress_requests (status, seq);
