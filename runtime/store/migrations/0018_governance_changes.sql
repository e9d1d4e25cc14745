-- Governance standing on the identity change feed (runtime/identity/change-feed.ts): every
-- committed change of a governed agent's status is NOTIFYed as `{"n","g": name, "s": status}`
-- (`s` null when the record is gone), so the identity authority answers
-- GET /v1/governance/standing from memory (governance/standing-view.ts) and the control plane's
-- poll is never queued behind a long transaction (a directory sync holds PGlite's only
-- connection for seconds). The function of 0014 gains the branch; the other tables are unchanged.
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
  elsif tg_table_name = 'governance_agents' then
    if tg_op = 'DELETE' then
      payload := json_build_object('n', n, 'g', old.agent_name, 's', null)::text;
    else
      if tg_op = 'UPDATE' and old.agent_name <> new.agent_name then
        perform pg_notify(ch, json_build_object('n', n, 'g', old.agent_name, 's', null)::text);
      end if;
      payload := json_build_object('n', n, 'g', new.agent_name, 's', new.status)::text;
    end if;
  end if;
  if payload is null or length(payload) > 7000 then
    payload := json_build_object('n', n, 'resync', true)::text;
  end if;
  perform pg_notify(ch, payload);
  return null;
end
$$;

drop trigger if exists governance_agents_changes on governance_agents;
create trigger governance_agents_changes after insert or delete or update of status, agent_name on governance_agents
  for each row execute function identity_changes_notify();
