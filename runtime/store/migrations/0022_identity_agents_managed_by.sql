-- Declarative identity agents (POST /v1/agents/apply): the producer that manages an agent, so a
-- producer's apply retires only the agents it manages, and when it retired one. A retired agent
-- keeps its row and its credential history; its credentials are revoked and it is not provisioned
-- again until a producer (or POST /v1/agents) declares it again.
alter table identity_agents add column if not exists managed_by text;
alter table identity_agents add column if not exists retired_at timestamptz;
create index if not exists identity_agents_managed_by on identity_agents (managed_by) where managed_by is not null;
