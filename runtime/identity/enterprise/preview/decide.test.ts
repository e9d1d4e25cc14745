/**
 * The pure preview against literal expectations: for an agent in each lifecycle status, what the
 * owner may `approve` (the grant's rule: approved or active agents receive delegations) and
 * `operate` (the decision point's rule: a governed agent acts only while active), and the
 * authority bases in their order of strength.
 */
import { describe, expect, it } from 'vitest';
import { decide, type AgentFact, type PrincipalFacts } from './decide.js';

const agent = (o: Partial<AgentFact>): AgentFact => ({
  name: 'bot',
  status: 'active',
  isOwner: false,
  inOwningTeam: false,
  managerLevel: 0,
  isSponsor: false,
  ...o,
});
const facts = (one: AgentFact): PrincipalFacts => ({ subject: 'idp_a:t:alice', active: true, roles: [], groups: [], agents: [one], scenarioAgent: one });
const verdict = (res: { eligible: boolean; reason: string }) => `${res.eligible ? 'yes' : 'no'} ${res.reason}`;

describe('authority preview rules', () => {
  it.each([
    // status            approve (the owner)                 operate
    ['draft', 'no agent_draft', 'no agent_draft'],
    ['pending_approval', 'no agent_pending_approval', 'no agent_pending_approval'],
    ['approved', 'yes agent_owner', 'no agent_approved'],
    ['active', 'yes agent_owner', 'yes active_employee'],
    ['suspended', 'no agent_suspended', 'no agent_suspended'],
    ['quarantined', 'no agent_quarantined', 'no agent_quarantined'],
    ['retired', 'no agent_retired', 'no agent_retired'],
  ])('an agent %s: approve %s, operate %s', (status, approve, operate) => {
    const [a, o] = decide(['approve', 'operate'], facts(agent({ status, isOwner: true })), []);
    expect(verdict(a!)).toBe(approve);
    expect(verdict(o!)).toBe(operate);
  });

  it('operate on an approved agent says the decision point refuses it until it is active', () => {
    const [o] = decide(['operate'], facts(agent({ status: 'approved' })), []);
    expect(o!.note).toContain('acts only while active');
  });

  it.each([
    [{ isOwner: true, inOwningTeam: true, managerLevel: 2 }, 'yes agent_owner'],
    [{ inOwningTeam: true, managerLevel: 1 }, 'yes owning_team_member'],
    [{ managerLevel: 3 }, 'yes owner_manager_chain'],
    [{ isSponsor: true }, 'no no_authority_basis'],
    [{}, 'no no_authority_basis'],
  ])('approve with %o: %s', (relation, expected) => {
    const [a] = decide(['approve'], facts(agent(relation)), []);
    expect(verdict(a!)).toBe(expected);
  });

  it('tenant-wide approve counts the agents with a basis and those that receive delegations', () => {
    const agents = [agent({ name: 'a', isOwner: true }), agent({ name: 'b', status: 'draft', inOwningTeam: true }), agent({ name: 'c' })];
    const [a] = decide(['approve'], { subject: 's', active: true, roles: [], groups: [], agents }, []);
    expect(verdict(a!)).toBe('yes agent_owner');
    expect(a!.note).toContain('Holds authority over 2 agent(s) (agent_owner, owning_team_member); 1 of them approved or active');
  });
});
