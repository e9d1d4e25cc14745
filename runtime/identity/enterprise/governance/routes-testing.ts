/**
 * Test helper: the setup the governance route tests (routes-*.test.ts) share. The enterprise
 * routes over real HTTP on a store holding the Entra fixture directory (tenant `contoso`) and a
 * one-employee `fabrikam`, and the register / transition calls those tests build agents with.
 */
import { afterAll, beforeAll, expect } from 'vitest';
import type { Store } from '../../../store/factory.js';
import type { TestBackend } from '../../../store/testing.js';
import { ENTRA, entraSnapshot } from '../directory/fixtures.js';
import { seedEmployee, seedGroup, serveEnterprise } from './testkit.js';

export const T = 'contoso';
export const S = (oid: string) => `idp_a:${T}:${oid}`;
export const enc = encodeURIComponent;
export const T0 = Date.parse('2026-03-01T09:00:00.000Z');

export type GovernanceApi = Awaited<ReturnType<typeof serveEnterprise>>;

/** Opens a store on `b`, serves the enterprise routes on it (clock `now`), and loads the directory. */
export async function openGovernance(b: TestBackend, now: () => number): Promise<{ store: Store; api: GovernanceApi }> {
  const store = await b.open();
  let api: GovernanceApi | undefined;
  try {
    api = await serveEnterprise(store, now);
    const r = await api.post('/v1/directory/sync', { tenantId: T, ...entraSnapshot() });
    expect(r.status).toBe(200);
    await seedEmployee(store.db, { tenant: 'fabrikam', ext: 'fab1' });
    await seedGroup(store.db, 'fabrikam', 'fabgrp', ['fab1']);
    return { store, api };
  } catch (e) {
    await api?.close();
    await store.close();
    throw e;
  }
}

/** The routes a test file's suite runs against, with the clock they read (from T0; tests move `clock`). */
export interface GovernanceUnderTest {
  store: Store;
  api: GovernanceApi;
  clock: number;
}

/** Opens the routes (`openGovernance`) on `b` before the suite's tests and closes them after; the holder is filled in once they start. */
export function useGovernance(b: TestBackend): GovernanceUnderTest {
  const t = { clock: T0 } as GovernanceUnderTest;
  beforeAll(async () => {
    Object.assign(t, await openGovernance(b, () => t.clock));
  });
  afterAll(async () => {
    await t.api?.close();
    await t.store?.close();
  });
  return t;
}

/** Register (a `contoso` agent owned by Alice, sponsored by her manager), transition, and both to active. */
export function governedAgentCalls(api: () => GovernanceApi) {
  const register = (o: Record<string, unknown>) =>
    api().post('/v1/governance/agents', {
      tenantId: T,
      ownerType: 'employee',
      ownerRef: S(ENTRA.alice),
      businessSponsor: S(ENTRA.engMgr),
      riskTier: 'medium',
      approvedRuntime: 'doks_prod',
      createdBy: 'alice@contoso.com',
      ...o,
    });
  const move = (name: string, status: string, by = 'reviewer') => api().post(`/v1/governance/agents/${enc(name)}/transition`, { status, by });
  const activeAgent = async (name: string, o: Record<string, unknown> = {}) => {
    expect((await register({ agentName: name, ...o })).status).toBe(201);
    for (const s of ['pending_approval', 'approved', 'active']) expect((await move(name, s)).status).toBe(200);
  };
  return { register, move, activeAgent };
}
