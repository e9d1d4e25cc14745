/**
 * Property: whatever sequence of directory syncs, lifecycle moves, ownership transfers, grants,
 * revokes and cascades runs over two tenants (through the real HTTP routes), an operation aimed
 * at one tenant never reads or changes the other tenant's state, no call answers 5xx, and no
 * live delegation (pending/approved/active) is ever left on a suspended, quarantined or retired
 * agent.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../store/factory.js';
import { testBackends } from '../../../store/testing.js';
import { entraGroup, entraUser } from '../directory/fixtures.js';
import { directoryRepo } from '../directory/repo.js';
import { AGENT_STATUSES, INACTIVE_AGENT, LIVE_DELEGATION } from './model.js';
import { governanceRepo } from './repo.js';
import { serveEnterprise } from './testkit.js';

const EMPLOYEES = 4;
const AGENTS = 2;

type Op =
  | { k: 'sync'; t: number; active: boolean[]; member: boolean[] }
  | { k: 'register'; t: number; a: number; owner: number; stealName: boolean }
  | { k: 'move'; t: number; a: number; to: string; cross: boolean }
  | { k: 'activate'; t: number; a: number }
  | { k: 'transfer'; t: number; a: number; owner: number; cross: boolean }
  | { k: 'grant'; t: number; a: number; approver: number; group: boolean; breakGlass: boolean; crossAgent: boolean; crossApprover: boolean }
  | { k: 'revoke'; t: number; d: number; cross: boolean }
  | { k: 'cascade'; t: number }
  | { k: 'peek'; t: number; a: number };

const t01 = fc.integer({ min: 0, max: 1 });
const agent = fc.integer({ min: 0, max: AGENTS - 1 });
const emp = fc.integer({ min: 0, max: EMPLOYEES - 1 });
const mask = fc.array(fc.boolean(), { minLength: EMPLOYEES, maxLength: EMPLOYEES });
const w = <T>(weight: number, arbitrary: fc.Arbitrary<T>) => ({ weight, arbitrary });
const op: fc.Arbitrary<Op> = fc.oneof(
  w(1, fc.record({ k: fc.constant('sync' as const), t: t01, active: mask, member: mask })),
  w(2, fc.record({ k: fc.constant('register' as const), t: t01, a: agent, owner: emp, stealName: fc.boolean() })),
  w(2, fc.record({ k: fc.constant('move' as const), t: t01, a: agent, to: fc.constantFrom(...AGENT_STATUSES), cross: fc.boolean() })),
  w(2, fc.record({ k: fc.constant('activate' as const), t: t01, a: agent })),
  w(1, fc.record({ k: fc.constant('transfer' as const), t: t01, a: agent, owner: emp, cross: fc.boolean() })),
  w(
    3,
    fc.record({
      k: fc.constant('grant' as const),
      t: t01,
      a: agent,
      approver: emp,
      group: fc.boolean(),
      breakGlass: fc.boolean(),
      crossAgent: fc.boolean(),
      crossApprover: fc.boolean(),
    }),
  ),
  w(1, fc.record({ k: fc.constant('revoke' as const), t: t01, d: fc.integer({ min: 0, max: 7 }), cross: fc.boolean() })),
  w(1, fc.record({ k: fc.constant('cascade' as const), t: t01 })),
  w(1, fc.record({ k: fc.constant('peek' as const), t: t01, a: agent })),
);

describe.each(testBackends())('governance properties on $name', (b) => {
  let store: Store;
  let api: Awaited<ReturnType<typeof serveEnterprise>>;
  let clock = Date.parse('2026-04-01T00:00:00.000Z');
  let run = 0;

  beforeAll(async () => {
    store = await b.open();
    api = await serveEnterprise(store, () => clock);
  });
  afterAll(async () => {
    await api?.close();
    await store?.close();
  });

  const snapshot = (active: boolean[], member: boolean[]) => ({
    users: Array.from({ length: EMPLOYEES }, (_, i) =>
      entraUser({
        oid: `e${i}`,
        upn: `e${i}@x.example`,
        given: `E${i}`,
        family: 'X',
        department: i % 2 ? 'Ops' : undefined,
        managerOid: i ? 'e0' : undefined,
        active: active[i],
      }),
    ),
    groups: [
      entraGroup(
        'g',
        'G',
        member.flatMap((m, i) => (m ? [`e${i}`] : [])),
      ),
    ],
  });

  /** Everything the store holds for one tenant (governance and directory), for before/after comparison. */
  const stateOf = async (t: string) => {
    const g = governanceRepo(store.db, t);
    const d = directoryRepo(store.db, t);
    return JSON.stringify([
      await g.listAgents(),
      await g.listDelegations(),
      await g.listLog(),
      await d.listEmployees(),
      await d.listGroups(),
      await d.listSyncRuns(),
    ]);
  };

  it('tenant isolation and no live delegation on an inactive agent', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 4, maxLength: 16 }), async (ops) => {
        run++;
        const T = [`pa${run}`, `pb${run}`];
        const subj = (t: number, i: number) => `idp_a:${T[t]}:e${i}`;
        const name = (t: number, a: number) => `${T[t]}-agent${a}`;
        const ids: string[][] = [[], []];
        for (const t of [0, 1]) {
          const r = await api.post('/v1/directory/sync', { tenantId: T[t], ...snapshot([true, true, true, true], [true, true, false, false]) });
          expect(r.status).toBe(200);
        }
        for (const o of ops) {
          clock += 30_000;
          const t = o.t;
          const other = 1 - t;
          const before = await stateOf(T[other]!);
          let r: { status: number; body: any };
          switch (o.k) {
            case 'sync':
              r = await api.post('/v1/directory/sync', { tenantId: T[t], ...snapshot(o.active, o.member) });
              expect(r.status).toBe(200);
              break;
            case 'register':
              // stealName: try to register an agent name the other tenant holds (must be 409), so
              // name(t, a) always belongs to tenant t when it exists.
              if (o.stealName && !(await governanceRepo(store.db, T[other]!).getAgent(name(other, o.a)))) continue;
              r = await api.post('/v1/governance/agents', {
                agentName: o.stealName ? name(other, o.a) : name(t, o.a),
                tenantId: T[t],
                ownerType: 'employee',
                ownerRef: subj(t, o.owner),
                businessSponsor: subj(t, 0),
                riskTier: 'low',
                approvedRuntime: 'local_dev',
              });
              expect([201, 409]).toContain(r.status);
              if (o.stealName) expect(r.body.error.code).toBe('agent_exists');
              break;
            case 'move':
              // cross: this tenant's caller (guard ?tenant=) aims at the other tenant's agent.
              r = await api.post(`/v1/governance/agents/${name(o.cross ? other : t, o.a)}/transition?tenant=${T[t]}`, { status: o.to });
              expect(o.cross ? [404] : [200, 404, 409]).toContain(r.status);
              break;
            case 'activate':
              // draft -> pending_approval -> approved -> active, stopping at the first refusal.
              for (const to of ['pending_approval', 'approved', 'active']) {
                r = await api.post(`/v1/governance/agents/${name(t, o.a)}/transition`, { status: to });
                expect([200, 404, 409]).toContain(r.status);
              }
              break;
            case 'transfer':
              r = await api.post(`/v1/governance/agents/${name(t, o.a)}/transfer-ownership`, {
                ownerType: 'employee',
                ownerRef: subj(o.cross ? other : t, o.owner),
              });
              expect([200, 400, 404, 409]).toContain(r.status);
              if (o.cross) expect(r.status).not.toBe(200);
              break;
            case 'grant':
              r = await api.post('/v1/authority/delegations', {
                tenantId: T[t],
                agentId: name(o.crossAgent ? other : t, o.a),
                approverRef: subj(o.crossApprover ? other : t, o.approver),
                action: 'read',
                resource: 'files/*',
                breakGlass: o.breakGlass,
                expiresInSeconds: 120,
                ...(o.group ? { requiredGroup: 'g' } : {}),
              });
              expect([201, 403, 404]).toContain(r.status);
              if (o.crossAgent || o.crossApprover) expect(r.status).not.toBe(201);
              if (r.status === 201) {
                expect(r.body.tenant_id).toBe(T[t]);
                ids[t]!.push(r.body.delegation_id);
              }
              break;
            case 'revoke': {
              const owner = o.cross ? other : t;
              const id = ids[owner]![o.d % Math.max(1, ids[owner]!.length)];
              if (!id) continue;
              r = await api.post(`/v1/authority/delegations/${id}/revoke?tenant=${T[t]}`, { reason: 'policy_changed' });
              expect(o.cross ? [404] : [200, 409]).toContain(r.status);
              break;
            }
            case 'cascade':
              r = await api.post(`/v1/revocation/cascade?tenant=${T[t]}`);
              expect(r.status).toBe(200);
              break;
            case 'peek':
              // Reads scoped to this tenant never show the other tenant's records.
              // (a stolen name may legitimately live in this tenant: then it is this tenant's record)
              for (const n of [name(other, o.a), name(t, o.a)]) {
                const one = await api.get(`/v1/governance/agents/${n}?tenant=${T[t]}`);
                expect([200, 404]).toContain(one.status);
                if (one.status === 200) expect(one.body.tenant_id).toBe(T[t]);
              }
              for (const p of ['/v1/governance/agents', '/v1/authority/delegations', '/v1/revocation/log', '/v1/governance/issues']) {
                const l = await api.get(`${p}?tenant=${T[t]}`);
                expect(l.status).toBe(200);
                for (const x of l.body) expect(x.tenant_id).toBe(T[t]);
              }
              expect((await api.get(`/v1/governance/summary?tenant=${T[t]}`)).status).toBe(200);
              break;
          }
          expect(await stateOf(T[other]!)).toBe(before);
          for (const tt of T) {
            const g = governanceRepo(store.db, tt);
            const status = new Map((await g.listAgents()).map((a) => [a.agentName, a.status]));
            for (const d of await g.listDelegations()) {
              if (!LIVE_DELEGATION.has(d.status)) continue;
              const s = status.get(d.agentId);
              expect(s === undefined || INACTIVE_AGENT.has(s), `live delegation ${d.delegationId} on ${d.agentId} (${s})`).toBe(false);
            }
          }
        }
      }),
      {
        numRuns: b.name === 'pglite' ? 25 : 15,
        examples: [
          [
            [
              { k: 'register', t: 0, a: 0, owner: 1, stealName: false },
              { k: 'activate', t: 0, a: 0 },
              { k: 'grant', t: 0, a: 0, approver: 0, group: false, breakGlass: false, crossAgent: false, crossApprover: false },
              { k: 'move', t: 0, a: 0, to: 'suspended', cross: false },
            ],
          ],
        ],
        seed: Number(process.env.FC_SEED) || undefined,
      },
    );
  }, 60_000);
});
