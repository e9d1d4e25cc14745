-- Governance guards (SPEC 2.8, 2.9: `history` is append-only; the revocation log is a record of
-- consequences). Enforced in the database so no code path, present or future, can rewrite them:
-- an update may only append to `history`, and revocation-log rows are never updated or deleted.
create or replace function governance_history_append_only() returns trigger language plpgsql as $fn$
declare
  n int := jsonb_array_length(old.history);
begin
  if jsonb_typeof(new.history) is distinct from 'array'
     or jsonb_array_length(new.history) < n
     or (select coalesce(jsonb_agg(e order by i), '[]'::jsonb)
           from jsonb_array_elements(new.history) with ordinality as h(e, i) where i <= n) <> old.history then
    raise exception 'history of % is append-only', tg_table_name using errcode = 'check_violation';
  end if;
  return new;
end
$fn$;

create or replace function governance_log_immutable() returns trigger language plpgsql as $fn$
begin
  raise exception 'the revocation log is append-only' using errcode = 'check_violation';
end
$fn$;

drop trigger if exists governance_agents_history on governance_agents;
create trigger governance_agents_history before update of history on governance_agents
  for each row execute function governance_history_append_only();

drop trigger if exists governance_delegations_history on governance_delegations;
create trigger governance_delegations_history before update of history on governance_delegations
  for each row execute function governance_history_append_only();

drop trigger if exists governance_revocation_log_immutable on governance_revocation_log;
create trigger governance_revocation_log_immutable before update or delete on governance_revocation_log
  for each row execute function governance_log_immutable();

-- The summary and issues group a tenant's agents by owner.
create index if not exists governance_agents_owner on governance_agents (tenant_id, owner_type, owner_ref);
