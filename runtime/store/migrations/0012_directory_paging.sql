-- The directory sync reads a tenant's employees and groups in key order, page by page (so the
-- event loop runs between pages on the embedded store): one index range per page, no sort.
create index if not exists directory_employees_tenant_subject on directory_employees (tenant_id, employee_subject);
create index if not exists directory_groups_tenant_key on directory_groups (tenant_id, group_key);
