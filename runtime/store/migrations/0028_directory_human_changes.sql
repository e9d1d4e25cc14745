-- A deactivated human on the identity change feed (issue 43 item 4): every token derived from a
-- human (its `sub`: the delegation's approver or the OIDC subject) is inactive at every
-- enforcement point once that human is deactivated in the directory, and a token issued before
-- a deactivation stays inactive after a reactivation (as Entra's "valid from" and Okta's
-- deactivation do: access comes back only through a new token).
--
-- tokens_not_before: set when a row turns (or is inserted) inactive, kept across a reactivation;
-- a token whose `iat` is not after it is inactive. clock_timestamp(): the latest time the row
-- write knows, so a token issued before the write is caught.
alter table directory_employees add column if not exists tokens_not_before timestamptz;
update directory_employees set tokens_not_before = coalesce(deactivated_at, updated_at) where status <> 'active' and tokens_not_before is null;
create index if not exists directory_employees_email on directory_employees (email) where email is not null;

create or replace function directory_employees_not_before() returns trigger language plpgsql as $$
begin
  new.tokens_not_before := clock_timestamp();
  return new;
end
$$;

drop trigger if exists directory_employees_inactive_insert on directory_employees;
create trigger directory_employees_inactive_insert before insert on directory_employees
  for each row when (new.status <> 'active') execute function directory_employees_not_before();
drop trigger if exists directory_employees_inactive_update on directory_employees;
create trigger directory_employees_inactive_update before update on directory_employees
  for each row when (new.status <> 'active' and old.status = 'active') execute function directory_employees_not_before();

-- One notification per statement (a directory sync writes thousands of rows at once): the human
-- references it touched (subjects and emails of rows inserted, deleted, or whose status, email or
-- tokens_not_before changed), each with its state over the whole table now:
-- `{"n", "hu": [[ref, deactivated, notBeforeEpochSeconds | null], ...]}`. `deactivated`: every
-- row it names is inactive (a rehire's active row clears it). More than 60 references: `resync`.
create or replace function directory_humans_notify() returns trigger language plpgsql as $$
declare
  ch text := 'identity_changes_' || tg_table_schema;
  refs text[];
  n bigint;
  agg text;
  payload text;
begin
  if length(ch) > 63 then
    ch := 'identity_changes_' || left(md5(tg_table_schema), 24);
  end if;
  if tg_op = 'INSERT' then
    select array_agg(distinct r) into refs from (
      select employee_subject as r from new_rows union all select email from new_rows where email is not null) x;
  elsif tg_op = 'DELETE' then
    select array_agg(distinct r) into refs from (
      select employee_subject as r from old_rows union all select email from old_rows where email is not null) x;
  else
    select array_agg(distinct r) into refs from (
      select unnest(array[o.employee_subject, o.email, w.email]) as r
      from new_rows w join old_rows o on o.employee_subject = w.employee_subject
      where o.status is distinct from w.status or o.email is distinct from w.email
        or o.tokens_not_before is distinct from w.tokens_not_before) x
    where r is not null;
  end if;
  if refs is null or cardinality(refs) = 0 then
    return null;
  end if;
  n := nextval(format('%I.identity_change_seq', tg_table_schema)::regclass);
  if cardinality(refs) > 60 then
    payload := json_build_object('n', n, 'resync', true)::text;
  else
    select json_agg(json_build_array(ref, off, nb))::text into agg from (
      select r.ref, coalesce(bool_and(e.status <> 'active'), false) as off,
             floor(extract(epoch from max(e.tokens_not_before)))::bigint as nb
      from unnest(refs) as r(ref)
      left join directory_employees e on e.employee_subject = r.ref or e.email = r.ref
      group by r.ref) s;
    payload := json_build_object('n', n, 'hu', agg::json)::text;
    if length(payload) > 7000 then
      payload := json_build_object('n', n, 'resync', true)::text;
    end if;
  end if;
  perform pg_notify(ch, payload);
  return null;
end
$$;

drop trigger if exists directory_humans_insert on directory_employees;
create trigger directory_humans_insert after insert on directory_employees
  referencing new table as new_rows for each statement execute function directory_humans_notify();
drop trigger if exists directory_humans_update on directory_employees;
create trigger directory_humans_update after update on directory_employees
  referencing old table as old_rows new table as new_rows for each statement execute function directory_humans_notify();
drop trigger if exists directory_humans_delete on directory_employees;
create trigger directory_humans_delete after delete on directory_employees
  referencing old table as old_rows for each statement execute function directory_humans_notify();
