-- Pending egress requests survive a restart (issue 15, item 9). A request whose holding process
-- is gone is no longer expired: its holder_instance becomes NULL (no connection waits on it) and
-- it stays pending until its deadline. A human's decision on such a request waits for the agent:
-- the next identical request (same actor, DID, target, service, action, resource) takes it once
-- and records when in used_at. A decision made while the connection was held is used by that
-- connection at once (used_at set with the decision).
alter table egress_requests add column if not exists used_at timestamptz;
-- Before this migration NULL meant "held by a process that predates holder instances": those
-- connections are long gone and nothing would answer a decision on them.
update egress_requests set status = 'expired', decided_at = now(), deny_reason = 'the held connection was lost'
  where status = 'pending' and holder_instance is null;
-- Decided rows predating used_at were used (or lost) with their connection.
update egress_requests set used_at = decided_at where status in ('approved', 'denied') and used_at is null;
-- The retry lookup: decisions and pending requests no connection waits on.
create index if not exists egress_requests_unheld on egress_requests (actor, target)
  where holder_instance is null and used_at is null and status <> 'expired';
