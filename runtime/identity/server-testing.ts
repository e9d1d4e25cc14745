/**
 * Test helper: what the identity authority tests (server-*.test.ts) share. An in-process client
 * for its app, the two error shapes, the authority started on a test store, and agent provisioning.
 */
import { expect } from 'vitest';
import type { Store } from '../store/factory.js';
import type { TestBackend } from '../store/testing.js';
import { createIdentityAuthority, type IdentityAuthority } from './server.js';

export type Json = any;

export function client(a: IdentityAuthority) {
  const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const init: RequestInit = { method, headers: { ...headers } };
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
    auth = createIdentityAuthority({ store, env: { IDP_ISSUER_HOST: 'idp.example.com:8443' }, now });
    await auth.whenReady();
    return { store, auth, api: client(auth) };
  } catch (e) {
    await auth?.close();
    await store.close();
    throw e;
  }
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
