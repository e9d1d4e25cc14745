/**
 * Test helpers for the decision: a policy snapshot of plain services, settings and standing,
 * and an engine over plain ports (in-memory budget meter, audit as an array). No fakes of the
 * decision itself: every test runs the real evaluate, decide and commit.
 */
import type { BudgetMeter } from '../budget/ports.js';
import { createBudgetMeter } from '../budget/testkit.js';
import type { GovernanceStanding, IdentityPort } from '../identity-port.js';
import { snapshotOf } from '../registry/snapshot.js';
import type { AuditEntry, Service } from '../types.js';
import { createDecisionEngine, type DecisionEngine } from './engine.js';
import type { OidcPort, OpaPort, TicketVerifier } from './gather.js';
import { makePolicySnapshot } from './policy.js';
import type { DecisionSettings, PolicySnapshot } from './types.js';

export const SETTINGS: DecisionSettings = {
  identityMode: 'header',
  identityAuthority: false,
  oidc: false,
  opa: false,
  vpAudience: 'writ-egress',
  requireGoverned: false,
  governanceMaxAgeMs: 2000,
  connectPorts: new Set([443]),
};

export function policyOf(services: readonly Service[], settings: Partial<DecisionSettings> = {}, governance?: GovernanceStanding, version = 1): PolicySnapshot {
  return makePolicySnapshot(snapshotOf(services, version), governance, { ...SETTINGS, ...settings });
}

export interface TestEngine extends DecisionEngine {
  audit: AuditEntry[];
  budget: BudgetMeter;
}

export function engineOf(
  services: readonly Service[],
  o: {
    settings?: Partial<DecisionSettings>;
    identity?: IdentityPort;
    oidc?: OidcPort;
    opa?: OpaPort;
    tickets?: TicketVerifier & { mint(a: string, u: string): string };
    now?: () => number;
    governance?: () => GovernanceStanding | undefined;
    budget?: BudgetMeter;
  } = {},
): TestEngine {
  const audit: AuditEntry[] = [];
  const budget = o.budget ?? createBudgetMeter();
  const now = o.now ?? Date.now;
  const settings = { ...SETTINGS, identityAuthority: !!o.identity, oidc: !!o.oidc, opa: !!o.opa, ...o.settings };
  const reg = snapshotOf(services);
  const engine = createDecisionEngine({
    policy: { current: () => makePolicySnapshot(reg, o.governance?.(), settings) },
    ports: { identity: o.identity, oidc: o.oidc, opa: o.opa, budget, tickets: o.tickets, identityTimeoutMs: 200, now },
    sinks: { budget, audit: { append: (e) => audit.push(e) }, tickets: o.tickets, now },
  });
  return { ...engine, audit, budget };
}
