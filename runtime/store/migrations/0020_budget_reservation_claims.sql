-- A settlement that finds no row of its reservation (the row still on its way from the replica
-- that reserved it, or no such reservation) claims the id once its wait is over: a row in state
-- `unreserved` holding the report's figures, whose usage is charged as unreserved. The
-- reservation's own row, when it lands later, takes the claim over (state `settled`) and gives
-- its whole worst case back, so the call is charged once, whichever replica settles it and
-- however late the row is written.
alter table budget_reservations drop constraint if exists budget_reservations_state_check;
alter table budget_reservations add constraint budget_reservations_state_check
  check (state in ('open', 'settled', 'expired', 'unreserved'));
