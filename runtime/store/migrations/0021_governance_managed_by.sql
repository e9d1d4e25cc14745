-- Declarative governance (operator/, POST /v1/governance/agents/apply): the producer that
-- manages a governed agent (`folder:<path>`, `kubernetes:<cluster>`), recorded so that a
-- producer's apply prunes (retires) only the agents it manages, as the registry's `managed_by`
-- does for registry entries. Null: registered through the API, managed by no producer.
alter table governance_agents add column if not exists managed_by text;
create index if not exists governance_agents_managed_by on governance_agents (managed_by) where managed_by is not null;
