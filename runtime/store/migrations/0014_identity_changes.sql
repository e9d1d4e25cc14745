-- Change notifications for the identity authority's in-memory views (runtime/identity/
-- change-feed.ts): every committed revocation, agent key binding and API-key state change is
-- NOTIFYed on `identity_changes_<schema>` by the database itself, so every writer is covered and
-- a notification is sent only when its transaction commits. Payloads are small JSON objects;
-- one that could exceed NOTIFY's limit is replaced by `{"resync":true}`. Each carries `n`, a
-- value of identity_change_seq: a listener that sees the sequence ahead of every `n` it received
-- (checked with its pings) knows a notification may have been lost and reloads.
create sequence if not exists identity_change_seq;

create or replace function identity_changes_notify() returns trigger language plpgsql as $$
declare
  ch text := 'identity_changes_' || tg_table_schema;
  payload text;
  n bigint := nextval(format('%I.identity_change_seq', tg_table_schema)::regclass);
begin
  if length(ch) > 63 then
    ch := 'identity_changes_' || left(md5(tg_table_schema), 24);
  end if;
  if tg_table_name = 'identity_revocations' then
    payload := json_build_object('n', n, 'r', new.jti, 't', new.tenant_id)::text;
  elsif tg_table_name = 'identity_agents' then
    if tg_op = 'DELETE' then
      payload := json_build_object('n', n, 'a', old.name, 't', old.tenant_id, 'd', null, 'o', old.did)::text;
    elsif tg_op = 'INSERT' then
      payload := json_build_object('n', n, 'a', new.name, 't', new.tenant_id, 'd', new.did, 'o', null)::text;
    else
      payload := json_build_object('n', n, 'a', new.name, 't', new.tenant_id, 'd', new.did, 'o', old.did)::text;
    end if;
  elsif tg_table_name = 'api_keys' then
    payload := json_build_object('n', n, 'k', case when tg_op = 'DELETE' then old.id else new.id end)::text;
  end if;
  if payload is null or length(payload) > 7000 then
    payload := json_build_object('n', n, 'resync', true)::text;
  end if;
  perform pg_notify(ch, payload);
  return null;
end
$$;

drop trigger if exists identity_revocations_changes on identity_revocations;
create trigger identity_revocations_changes after insert on identity_revocations
  for each row execute function identity_changes_notify();

drop trigger if exists identity_agents_changes on identity_agents;
create trigger identity_agents_changes after insert or delete or update of did, tenant_id, name on identity_agents
  for each row execute function identity_changes_notify();

drop trigger if exists api_keys_changes on api_keys;
create trigger api_keys_changes after insert or delete or update of status, salt, hash, env, tenant_id, scopes on api_keys
  for each row execute function identity_changes_notify();
