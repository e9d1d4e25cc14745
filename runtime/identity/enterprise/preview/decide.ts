/**
 * Pure authority preview (SPEC 2.11, 4.6): design-time eligibility of one principal for the five
 * capabilities, with the reason that decided and a human note. Facts in, results out. It asks the
 * rules the enforcement asks, never a copy of them: which agents receive delegations
 * (GRANTABLE_AGENT) and the standing authority bases (standingBases), as the delegation grant
 * does (governance/policy.ts); whether an agent may act at all (mayAct), as the decision point
 * does (lib/governance-standing.ts). It is still never an enforcement decision.
 */
import { mayAct } from '../../../lib/governance-standing.js';
import { GRANTABLE_AGENT, type AgentStatus } from '../governance/model.js';
import { standingBases } from '../governance/policy.js';

export const ACTIONS = ['own', 'sponsor', 'approve', 'operate', 'audit'] as const;
export type Action = (typeof ACTIONS)[number];

export interface AgentFact {
  name: string;
  status: string;
  isOwner: boolean;
  inOwningTeam: boolean;
  /** Position in the owning employee's manager chain (1 = direct manager), 0 = not in it. */
  managerLevel: number;
  isSponsor: boolean;
}

export interface PrincipalFacts {
  subject: string;
  active: boolean;
  roles: string[];
  groups: string[];
  /** Non-retired governed agents of the principal's tenant, with the principal's relation to each. */
  agents: AgentFact[];
  /** Set when the scenario names one agent (`agent:<name>`). */
  scenarioAgent?: AgentFact;
}

export interface Result {
  action: Action;
  eligible: boolean;
  reason: string;
  note: string;
}

const DISCLAIMER = 'Preview only, not an enforcement decision; use the control plane /authz dry-run for a runtime-faithful answer.';

const r = (action: Action, eligible: boolean, reason: string, note: string): Result => ({ action, eligible, reason, note: `${note} ${DISCLAIMER}` });

/** The agent receives delegations (the grant's agent_grantable check). */
const grantable = (a: AgentFact): boolean => GRANTABLE_AGENT.has(a.status as AgentStatus);

export function denyAll(actions: readonly Action[], reason: string, note: string): Result[] {
  return actions.map((a) => r(a, false, reason, note));
}

export function decide(actions: readonly Action[], f: PrincipalFacts, auditRoles: readonly string[]): Result[] {
  if (!f.active) {
    return denyAll(
      actions,
      'employee_inactive',
      `${f.subject} is inactive in the directory: an inactive employee holds no authority (the cascade suspends what they own and invalidates what they granted).`,
    );
  }
  const one = f.scenarioAgent;
  const count = (p: (a: AgentFact) => boolean) => f.agents.filter(p).length;
  return actions.map((action): Result => {
    switch (action) {
      case 'own':
        if (one) {
          return one.isOwner
            ? r(action, true, 'agent_owner', `${f.subject} is the owner of ${one.name}.`)
            : r(
                action,
                true,
                'transfer_target_eligible',
                `${f.subject} is an active employee of the tenant, so ownership of ${one.name} could be transferred to them.`,
              );
        }
        return r(action, true, 'active_employee', `An active employee of the tenant can own governed agents; owns ${count((a) => a.isOwner)} now.`);
      case 'sponsor':
        if (one) {
          const same = one.isOwner ? ' They also own it: owner and sponsor would be the same person.' : '';
          return r(
            action,
            true,
            one.isSponsor ? 'current_sponsor' : 'active_employee',
            `${one.isSponsor ? 'Is' : 'Can be'} the business sponsor of ${one.name}.${same}`,
          );
        }
        return r(action, true, 'active_employee', `An active employee can be a business sponsor; sponsors ${count((a) => a.isSponsor)} agent(s) now.`);
      case 'approve': {
        if (one) {
          if (!grantable(one))
            return r(action, false, `agent_${one.status}`, `${one.name} is ${one.status}; only approved or active agents receive delegations.`);
          const b = standingBases(one);
          return b.length
            ? r(action, true, b[0]!, `Holds authority over ${one.name}: ${b.join(', ')}.`)
            : r(
                action,
                false,
                'no_authority_basis',
                `Not the owner of ${one.name}, not in its owning team, not in its owner's manager chain; could approve only where a delegation names a requiredGroup they belong to, or by break-glass.`,
              );
        }
        const withBasis = f.agents.filter((a) => standingBases(a).length > 0);
        if (!withBasis.length) {
          return r(
            action,
            false,
            'no_authority_basis',
            "Holds no standing authority over any governed agent of the tenant (owner, owning team, owner's manager chain); could approve only through a delegation's requiredGroup or break-glass.",
          );
        }
        const kinds = [...new Set(withBasis.flatMap((a) => standingBases(a)))];
        const receiving = withBasis.filter(grantable).length;
        return r(
          action,
          true,
          kinds[0]!,
          `Holds authority over ${withBasis.length} agent(s) (${kinds.join(', ')}); ${receiving} of them approved or active and able to receive delegations now.`,
        );
      }
      case 'operate':
        if (one) {
          return mayAct(one.status)
            ? r(
                action,
                true,
                'active_employee',
                `Can request delegations for ${one.name} (requester: an active employee of its tenant); each action still needs a grant.`,
              )
            : r(
                action,
                false,
                `agent_${one.status}`,
                `${one.name} is ${one.status}; a governed agent acts only while active (the decision point refuses its calls otherwise).`,
              );
        }
        return r(
          action,
          true,
          'active_employee',
          'An active employee can be the requester an agent acts for; each action still needs a delegation granted by someone with authority.',
        );
      case 'audit': {
        const wanted = new Set(auditRoles.map((x) => x.toLowerCase()));
        const role = [...f.roles, ...f.groups].find((x) => wanted.has(x.toLowerCase()));
        if (role) return r(action, true, 'audit_role', `Holds the directory role or group ${role}.`);
        const pool = one ? [one] : f.agents;
        const acc = pool.filter((a) => a.isOwner || a.inOwningTeam || a.isSponsor || a.managerLevel > 0).length;
        if (acc)
          return r(
            action,
            true,
            'accountable_party',
            `Accountable for ${acc} agent(s) (owner, owning team, sponsor or manager chain) and may review their audit trail.`,
          );
        return r(
          action,
          false,
          'no_audit_basis',
          `Neither holds an audit role (${auditRoles.join(', ')}) nor is accountable for ${one ? one.name : 'any governed agent'}.`,
        );
      }
    }
  });
}
