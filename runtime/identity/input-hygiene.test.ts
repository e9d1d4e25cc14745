/**
 * Bad input is a 4xx, never a 5xx (issue 15 item 2), over a real socket: a NUL or an unpaired
 * surrogate in a body string, a path or a query parameter, and free-form JSON nested thousands
 * deep, answer 422 in the SPEC validation shape on every route of the identity authority. The
 * generic part walks `/openapi.json`, so a route added later is covered without editing this file.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_INPUT_DEPTH } from '../lib/api.js';
import type { Store } from '../store/factory.js';
import { testBackends } from '../store/testing.js';
import { startIdentityAuthority } from './server.js';

type Json = any;
const BAD = ['x\u0000y', 'x\ud800y', '\udc00'];

/** A value for a JSON schema whose every string is `s` (enums keep their first member). */
function synth(schema: Json, doc: Json, s: string, depth = 0): unknown {
  if (!schema || depth > 8) return s;
  if (schema.$ref) return synth(doc.components.schemas[schema.$ref.split('/').pop()], doc, s, depth + 1);
  const alt = schema.anyOf ?? schema.oneOf ?? schema.allOf;
  if (alt) return synth(alt.find((x: Json) => x.type !== 'null') ?? alt[0], doc, s, depth + 1);
  if (schema.enum) return schema.enum[0];
  if (schema.const !== undefined) return schema.const;
  const type = Array.isArray(schema.type) ? schema.type.find((t: string) => t !== 'null') : schema.type;
  switch (type) {
    case 'object': {
      const o: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(schema.properties ?? {})) o[k] = synth(v, doc, s, depth + 1);
      if (!schema.properties) o.k = s;
      return o;
    }
    case 'array':
      return [synth(schema.items, doc, s, depth + 1)];
    case 'integer':
    case 'number':
      return Math.max(1, schema.minimum ?? 1);
    case 'boolean':
      return false;
    default:
      return s;
  }
}

const expectDetail = (status: number, json: Json, where: string) => {
  expect(status, where).toBe(422);
  expect(Array.isArray(json?.detail), where).toBe(true);
  for (const d of json.detail) {
    expect(Array.isArray(d.loc)).toBe(true);
    expect(typeof d.msg).toBe('string');
    expect(typeof d.type).toBe('string');
  }
};

describe.each(testBackends())('identity authority input hygiene on $name', (b) => {
  let store: Store;
  let srv: Awaited<ReturnType<typeof startIdentityAuthority>>;
  let base: string;
  let doc: Json;

  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(base + path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json: Json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, json, text };
  };

  beforeAll(async () => {
    store = await b.open();
    srv = await startIdentityAuthority({ store, addr: '127.0.0.1:0' });
    await srv.authority.whenReady();
    base = `http://127.0.0.1:${srv.port}`;
    doc = (await call('GET', '/openapi.json')).json;
    // Something for the routes to find, so a handler runs past its lookups.
    expect((await call('POST', '/v1/agents', { name: 'a1', role: 'worker', capabilities: [] })).status).toBe(201);
  });
  afterAll(async () => {
    await srv?.close();
    await store?.close();
  });

  it('the reported requests: key name with NUL, key id with %00, approver with NUL', async () => {
    const key = await call('POST', '/v1/keys', { name: 'k\u0000', scopes: [] });
    expectDetail(key.status, key.json, 'POST /v1/keys');
    expect(key.json.detail[0].loc).toEqual(['body', 'name']);
    const get = await call('POST', '/v1/keys/a%00b/revoke', {});
    expectDetail(get.status, get.json, 'POST /v1/keys/a%00b/revoke');
    const agents = await call('GET', '/v1/agents/a%00b');
    expectDetail(agents.status, agents.json, 'GET /v1/agents/a%00b');
    const approve = await call('POST', '/v1/delegations/x/approve', { approver: 'x\u0000' });
    expectDetail(approve.status, approve.json, 'approve');
    const surrogate = await call('POST', '/v1/agents', { name: 'a2', role: 'r\ud800', capabilities: [] });
    expectDetail(surrogate.status, surrogate.json, 'lone surrogate');
    // A well-formed pair (an emoji) is fine.
    expect((await call('POST', '/v1/agents', { name: 'a3', role: 'r\ud83d\ude00', capabilities: [] })).status).toBe(201);
    const q = await call('GET', '/v1/directory/employees?tenant=t%00');
    expectDetail(q.status, q.json, 'query NUL');
    expect(q.json.detail[0].loc).toEqual(['query', 'tenant']);
  });

  it('capability constraints nested 5000 deep: 422 too_deep, and 30 deep is stored', async () => {
    // Built as text: JSON.stringify itself overflows the stack on this depth.
    const nested = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
    const r = await call('POST', '/v1/agents', `{"name":"deep","role":"r","capabilities":[{"action":"read","resource":"x","constraints":${nested(5000)}}]}`);
    expectDetail(r.status, r.json, 'deep');
    expect(r.json.detail[0].type).toBe('too_deep');
    let ok: unknown = 1;
    for (let i = 0; i < MAX_INPUT_DEPTH - 5; i++) ok = { a: ok };
    const fine = await call('POST', '/v1/agents', { name: 'shallow', role: 'r', capabilities: [{ action: 'read', resource: 'x', constraints: ok }] });
    expect(fine.status).toBe(201);
    expect((await call('GET', '/v1/agents/shallow')).json.capabilities[0].constraints).toEqual(ok);
    // The same depth as a raw JSON text deeper than the JS stack cares about is still a 4xx.
    const raw = `{"name":"d2","role":"r","capabilities":[{"action":"a","resource":"r","constraints":${nested(20000)}}]}`;
    const rr = await call('POST', '/v1/agents', raw);
    expect(rr.status).toBeGreaterThanOrEqual(400);
    expect(rr.status).toBeLessThan(500);
  });

  it('a SCIM sync body too big to parse in one block (parsed in slices): the same 422 and 200 answers as a small one', async () => {
    const users = Array.from({ length: 5000 }, (_, i) => ({
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      externalId: `big-${i}`,
      userName: `big${i}@example.com`,
      active: true,
    }));
    const body = { tenantId: 'hyg', idp: 'idp_a', users, groups: [] };
    expect(JSON.stringify(body).length).toBeGreaterThan(512 * 1024);
    const bad = structuredClone(body);
    bad.users[2999]!.userName = 'x\u0000y';
    const r = await call('POST', '/v1/directory/sync', bad);
    expectDetail(r.status, r.json, 'big sync with a NUL');
    expect(r.json.detail[0].loc).toEqual(['body', 'users', 2999, 'userName']);
    const deep = await call('POST', '/v1/directory/sync', JSON.stringify(body).replace('"groups":[]', `"groups":[${'['.repeat(40)}${']'.repeat(40)}]`));
    expectDetail(deep.status, deep.json, 'big sync nested too deep');
    expect(deep.json.detail[0].type).toBe('too_deep');
    const malformed = await call('POST', '/v1/directory/sync', JSON.stringify(body).replace('"big-3000"', '"big-3000",,'));
    expectDetail(malformed.status, malformed.json, 'big sync, malformed JSON');
    expect(malformed.json.detail[0].type).toBe('json_invalid');
    const ok = await call('POST', '/v1/directory/sync', body);
    expect(ok.status, ok.text.slice(0, 300)).toBe(200);
    expect(ok.json.counts.users_created).toBe(5000);
  });

  it('every route of /openapi.json: NUL or lone surrogate in each path parameter, query parameter and body string is a 422', async () => {
    const seen: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Json>)) {
      for (const [method, op] of Object.entries(ops as Record<string, Json>)) {
        const params: Json[] = op.parameters ?? [];
        const pathParams = params.filter((p) => p.in === 'path');
        const fill = (v: string) => path.replace(/\{([^}]+)\}/g, () => encodeURIComponent(v));
        const okPath = fill('p1');
        const bodySchema = op.requestBody?.content?.['application/json']?.schema;
        const okBody = bodySchema ? synth(bodySchema, doc, 'v') : undefined;
        for (const bad of BAD) {
          const enc = bad.includes('\u0000') ? 'x%00y' : encodeURIComponent(bad.replace(/[\ud800-\udfff]/g, '')) + '%ED%A0%80';
          if (pathParams.length) {
            const r = await call(
              method.toUpperCase(),
              path.replace(/\{([^}]+)\}/g, () => enc),
              okBody,
            );
            expectDetail(r.status, r.json, `${method} ${path} path ${JSON.stringify(bad)}`);
            seen.push(`${method} ${path} path`);
          }
          for (const p of params.filter((x) => x.in === 'query')) {
            const r = await call(method.toUpperCase(), `${okPath}?${p.name}=${enc}`, okBody);
            expectDetail(r.status, r.json, `${method} ${path} query ${p.name} ${JSON.stringify(bad)}`);
            seen.push(`${method} ${path} query`);
          }
          if (bodySchema) {
            const r = await call(method.toUpperCase(), okPath, synth(bodySchema, doc, bad));
            expect(r.status, `${method} ${path} body ${JSON.stringify(bad)}: ${r.text.slice(0, 300)}`).toBe(422);
            seen.push(`${method} ${path} body`);
          }
        }
      }
    }
    // The walk really covered the API (keys, agents, delegations, directory, governance, ...).
    expect(new Set(seen).size).toBeGreaterThan(30);
  });
});
