-- One desired state, one write path (registry apply). Every registry entry is owned by the
-- producer that declared it (`api`, `examples`, `folder:<path>`, `kubernetes:<cluster>`, ...), and
-- the registry as a whole has one monotonic version, bumped once per effective change set and
-- held in a single row whose row lock serializes writers across replicas. `rev` of a row is the
-- registry version at which it was last written.
alter table registry_services add column if not exists managed_by text not null default 'api';
create index if not exists registry_services_managed_by on registry_services (managed_by);
create table if not exists registry_state (
  id int primary key check (id = 1),
  version bigint not null,
  updated_at timestamptz not null default now()
);
insert into registry_state (id, version)
  select 1, coalesce((select max(rev) from registry_services), 0)
  where not exists (select 1 from registry_state);
