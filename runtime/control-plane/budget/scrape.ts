/** The usage the budget gauges read at a scrape (metrics.ts and `gauges.ts`). */
import { NO_USAGE, type BudgetUsage } from './policy.js';

/** A meter the budget gauges read: its own usage, and the whole fleet's when it shares a ledger. */
export interface ScrapedMeter {
  usage(agent: string, now: number): BudgetUsage;
  fleetUsage?(): Promise<ReadonlyMap<string, BudgetUsage>>;
}

/**
 * The usage the budget gauges show at a scrape: the fleet's, read from the ledger, when the
 * meter shares one (a replica's own view of an agent it no longer serves goes stale, and a
 * `max` over replicas would keep showing it); undefined when the ledger cannot be read, so the
 * series are left out rather than shown stale.
 */
export async function scrapedUsage(meter: ScrapedMeter, now: number): Promise<((agent: string) => BudgetUsage) | undefined> {
  if (!meter.fleetUsage) return (agent) => meter.usage(agent, now);
  const fleet = await meter.fleetUsage().catch(() => undefined);
  return fleet && ((agent) => fleet.get(agent) ?? NO_USAGE);
}
