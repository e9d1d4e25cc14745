-- Who holds an audit chain's lease (issue 44, item 2): the holder's identity (pod or host name),
-- its kernel boot, network and pid namespaces and pid, as JSON. A process restarting under the
-- same identity takes its chain back at once when this proves the holder is its own dead
-- predecessor, instead of waiting for the lease to lapse; a live holder is never taken over.
alter table audit_leases add column if not exists holder text;
