-- Audit records of MCP messages (issue 42, action `tool.call`): the tool, prompt or resource the
-- message names, the SHA-256 of its arguments' RFC 8785 form (never the arguments) and the MCP
-- session. NULL on every other record; a record's hash covers each field it has.
alter table audit_log add column if not exists tool text;
alter table audit_log add column if not exists args_digest text;
alter table audit_log add column if not exists session text;
