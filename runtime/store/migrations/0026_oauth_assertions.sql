-- RFC 7523 client assertions seen at the token endpoint (private_key_jwt): a (client, jti) pair
-- is accepted once (RFC 7523 3, item 7). Rows are kept until the assertion's exp has passed
-- (assertions live at most 5 minutes) and pruned by the endpoint as it inserts.
create table if not exists oauth_assertion_jtis (
  tenant_id text not null default 'default',
  agent_name text not null,
  jti text not null,
  exp bigint not null,
  primary key (tenant_id, agent_name, jti)
);
create index if not exists oauth_assertion_jtis_exp on oauth_assertion_jtis (exp);
