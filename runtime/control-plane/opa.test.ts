/** The OPA veto against a local HTTP server speaking OPA's data API. */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { close, listen } from '../lib/http.js';
import { createOpaClient, type OpaClient } from './opa.js';

describe('OPA veto client', () => {
  let server: http.Server;
  let base: string;
  let lastInput: unknown;
  const clients: OpaClient[] = [];
  const client = (path: string, timeoutMs = 300) => {
    const c = createOpaClient({ url: `${base}${path}`, timeoutMs });
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString() || '{}') as { input?: { allow?: boolean } };
        lastInput = body.input;
        const send = (status: number, text: string) => {
          res.writeHead(status, { 'content-type': 'application/json' });
          res.end(text);
        };
        switch (req.url) {
          case '/v1/data/writ/allow':
            // A real policy: allow when input.allow is true.
            return send(200, JSON.stringify({ result: body.input?.allow === true }));
          case '/v1/data/writ/undefined':
            return send(200, '{}');
          case '/v1/data/writ/string':
            return send(200, '{"result":"yes"}');
          case '/v1/data/writ/error':
            return send(500, '{"code":"internal_error"}');
          case '/v1/data/writ/notjson':
            return send(200, 'ok');
          case '/v1/data/writ/huge':
            return send(200, JSON.stringify({ result: true, pad: 'x'.repeat(100_000) }));
          case '/v1/data/writ/slow':
            setTimeout(() => send(200, '{"result":true}'), 2000).unref();
            return;
          default:
            return send(404, '{}');
        }
      });
    });
    base = `http://127.0.0.1:${await listen(server, '127.0.0.1:0')}`;
  });
  afterAll(async () => {
    for (const c of clients) await c.close();
    await close(server);
  });

  it('posts {input} and allows only on result === true', async () => {
    const c = client('/v1/data/writ/allow');
    expect(await c.evaluate({ allow: true, actor: 'bot' })).toEqual({ allow: true, reason: 'policy allowed' });
    expect(lastInput).toEqual({ allow: true, actor: 'bot' });
    expect(await c.evaluate({ allow: false })).toEqual({ allow: false, reason: 'policy denied' });
  });

  it.each([
    ['undefined document', '/v1/data/writ/undefined', /undefined/],
    ['non-boolean result', '/v1/data/writ/string', /not a boolean/],
    ['HTTP error', '/v1/data/writ/error', /HTTP 500/],
    ['unknown path', '/v1/data/writ/missing', /HTTP 404/],
    ['invalid JSON', '/v1/data/writ/notjson', /invalid JSON/],
    ['oversized answer', '/v1/data/writ/huge', /too large/],
    ['timeout', '/v1/data/writ/slow', /timed out/],
  ])('denies on %s', async (_n, path, reason) => {
    const r = await client(path).evaluate({ allow: true });
    expect(r.allow).toBe(false);
    expect(r.reason).toMatch(reason);
  });

  it('denies when OPA is unreachable', async () => {
    const c = createOpaClient({ url: 'http://127.0.0.1:1/v1/data/writ/allow', timeoutMs: 500 });
    clients.push(c);
    const r = await c.evaluate({});
    expect(r).toMatchObject({ allow: false, reason: expect.stringMatching(/unreachable/) });
  });

  it('rejects a non-http URL at construction', () => {
    expect(() => createOpaClient({ url: 'file:///etc/passwd' })).toThrow(/http/);
  });
});
