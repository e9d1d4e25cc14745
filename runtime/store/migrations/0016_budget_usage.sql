-- Agent budgets shared by every control-plane replica and surviving restarts (issue 14). One row
-- per agent, dimension (`calls`, `tokens`, `cost`) and time bucket (a minute for the hourly
-- dimensions, fifteen minutes for the daily one): what was charged in that bucket, by any
-- replica. A rolling window is the sum of its last buckets. Charges are taken under a
-- per-(agent, dimension) transaction lock, so a lease is granted only while the window has room.
create table if not exists budget_usage (
  agent text not null,
  dimension text not null,
  bucket bigint not null,
  used double precision not null default 0,
  primary key (agent, dimension, bucket)
);
