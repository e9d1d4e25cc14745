/**
 * Test helper: what the identity authority tests (server-*.test.ts) share. An in-process client
 * for its app, the two error shapes, the authority started on a test store, and agent provisioning.
 */
import { afterAll, beforeAll, expect } from 'vitest';
import type { Store } from '../store/factory.js';
import type { TestBackend } from '../store/testing.js';
import { createIdentityAuthority, type IdentityAuthority } from './server.js';
import { loadConfig } from '../lib/settings.js';

export type Json = any;

/** `key`: presented as `Authorization: Bearer` on every call (an authority with WRIT_API_AUTH=keys). */
export function client(a: IdentityAuthority, key?: string) {
  const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const init: RequestInit = { method, headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers } };
    if (body !== undefined) {
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
      (init.headers as Record<string, string>)['content-type'] = 'application/json';
    }
    const res = await a.app.request(path, init);
    const text = await res.text();
    let json: Json = undefined;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {}
    return { status: res.status, json, headers: res.headers, text };
  };
  return {
    get: (p: string, h?: Record<string, string>) => call('GET', p, undefined, h),
    post: (p: string, b?: unknown) => call('POST', p, b),
  };
}

export type Client = ReturnType<typeof client>;

export const expectEnvelope = (r: { json: Json }, code?: string) => {
  expect(typeof r.json.error.code).toBe('string');
  expect(typeof r.json.error.message).toBe('string');
  if (code) expect(r.json.error.code).toBe(code);
};
export const expectDetail = (r: { status: number; json: Json }) => {
  expect(r.status).toBe(422);
  expect(Array.isArray(r.json.detail)).toBe(true);
  expect(r.json.detail.length).toBeGreaterThan(0);
  for (const d of r.json.detail) {
    expect(Array.isArray(d.loc)).toBe(true);
    expect(typeof d.msg).toBe('string');
    expect(typeof d.type).toBe('string');
  }
};

/** A ready authority (issuer host idp.example.com:8443, clock `now`) on a fresh store from `b`. */
export async function openAuthority(b: TestBackend, now: () => number): Promise<{ store: Store; auth: IdentityAuthority; api: Client }> {
  const store = await b.open();
  let auth: IdentityAuthority | undefined;
  try {
    auth = createIdentityAuthority({ store, config: loadConfig({ IDP_ISSUER_HOST: 'idp.example.com:8443' }), now });
    await auth.whenReady();
    return { store, auth, api: client(auth) };
  } catch (e) {
    await auth?.close();
    await store.close();
    throw e;
  }
}

/** The authority a test file's suite runs against, with the clock it reads (tests move `clock`). */
export interface AuthorityUnderTest {
  store: Store;
  auth: IdentityAuthority;
  api: Client;
  clock: number;
}

/**
 * Opens an authority (`openAuthority`) on `b` before the suite's tests and closes it after them;
 * the returned holder is filled in once they start. Its clock starts at the real time the suite
 * starts (collection ran long before on a slow machine, and VPs minted at the real time would be
 * "not yet valid" beyond the 30 s skew).
 */
export function useAuthority(b: TestBackend): AuthorityUnderTest {
  const t = { clock: Date.now() } as AuthorityUnderTest;
  beforeAll(async () => {
    t.clock = Date.now();
    Object.assign(t, await openAuthority(b, () => t.clock));
  });
  afterAll(async () => {
    await t.auth?.close();
    await t.store?.close();
  });
  return t;
}

/** `provisioned(name, caps)`: registers agent `name` (role worker) and provisions it; returns the provision response. */
export function provisioner(api: () => Client) {
  return async function provisioned(name: string, caps: { action: string; resource: string }[] = [{ action: 'db:read', resource: 'db/*' }]) {
    expect((await api().post('/v1/agents', { name, role: 'worker', capabilities: caps })).status).toBe(201);
    const p = await api().post(`/v1/agents/${name}/provision`);
    expect(p.status).toBe(200);
    return p.json;
  };
}
