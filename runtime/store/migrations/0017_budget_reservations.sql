-- Broker reservations (issue 14): the worst case of a model call, charged to budget_usage before
-- the provider is called and settled once to the real figures by the usage report. A reservation
-- never settled expires (`expired`: its worst case stays charged) and a late report still settles
-- it exactly once; the state moves only forward, under a row update, so no replica applies a
-- settlement twice.
create table if not exists budget_reservations (
  id text primary key,
  agent text not null,
  tokens double precision not null,
  cost_usd double precision not null,
  -- Buckets the worst case was charged in (hour and day buckets), for the give-back.
  hour_bucket bigint not null,
  day_bucket bigint not null,
  state text not null check (state in ('open', 'settled', 'expired')),
  created_at timestamptz not null,
  expires_at timestamptz not null,
  settled_tokens double precision,
  settled_cost_usd double precision
);
create index if not exists budget_reservations_open on budget_reservations (expires_at) where state = 'open';
