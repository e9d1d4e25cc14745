/**
 * Request bodies over real sockets: limitBody checks a Content-Length without touching the body,
 * slicedJsonBody then reads it straight from the socket (lib/http.ts readBody), a chunked body goes
 * through the web Request, and a client that leaves mid-body neither hangs the route nor the server.
 */
import http from 'node:http';
import net from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi, limitBody, slicedJsonBody } from './api.js';
import { close, listen } from './http.js';

const LIMIT = 4 * 1024 * 1024;

describe('large JSON bodies', () => {
  let server: http.Server;
  let base: string;
  let port: number;
  let seen = 0;
  beforeAll(async () => {
    const app = createApi({ bodyLimitFor: (p) => (p === '/big' ? LIMIT : undefined) });
    app.post('/big', limitBody(LIMIT), slicedJsonBody(), async (c) => {
      seen++;
      const body = (await c.req.json()) as { items: { n: number }[] };
      return c.json({ count: body.items.length, last: body.items.at(-1)?.n });
    });
    server = http.createServer(getRequestListener(app.fetch));
    port = await listen(server, '127.0.0.1:0');
    base = `http://127.0.0.1:${port}`;
  });
  afterAll(() => close(server));

  const payload = (n: number) => JSON.stringify({ items: Array.from({ length: n }, (_, i) => ({ n: i, pad: 'x'.repeat(20) })) });

  it('a body with a Content-Length arriving in pieces is parsed whole, and the connection stays open', async () => {
    const body = Buffer.from(payload(40_000)); // ~1.4 MB: the sliced parse
    const answer = await new Promise<string>((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1');
      let out = '';
      s.on('data', (d) => (out += d.toString()));
      s.on('error', reject);
      s.write(`POST /big HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`);
      let at = 0;
      const step = () => {
        if (at >= body.length) return;
        s.write(body.subarray(at, at + 200_000));
        at += 200_000;
        setTimeout(step, 10);
      };
      step();
      const t = setInterval(() => {
        if (out.includes('"count"')) {
          clearInterval(t);
          s.destroy();
          resolve(out);
        }
      }, 5);
    });
    expect(answer).toMatch(/^HTTP\/1\.1 200/);
    expect(answer).toContain('{"count":40000,"last":39999}');
    expect(answer.toLowerCase()).not.toContain('connection: close');
  });

  it('a chunked body (no Content-Length) is read through the web Request and counted against the limit', async () => {
    const ok = await fetch(`${base}/big`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: new Blob([payload(1000)]).stream(),
      duplex: 'half',
    } as RequestInit);
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ count: 1000, last: 999 });
    const big = await fetch(`${base}/big`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: new Blob([payload(150_000)]).stream(),
      duplex: 'half',
    } as RequestInit);
    expect(big.status).toBe(413);
  });

  it('a declared length over the limit is 413 before any of the body is read', async () => {
    const before = seen;
    const res = await new Promise<string>((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1');
      let out = '';
      s.on('data', (d) => (out += d.toString()));
      s.on('close', () => resolve(out));
      s.on('error', reject);
      s.write(`POST /big HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${LIMIT + 1}\r\n\r\n{"items":[`);
    });
    expect(res).toMatch(/^HTTP\/1\.1 413/);
    expect(res).toContain('payload_too_large');
    expect(seen).toBe(before);
  });

  it('a client that leaves mid-body: the route never runs, and the server keeps answering', async () => {
    const before = seen;
    await new Promise<void>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.write(`POST /big HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2000000\r\n\r\n{"items":[`);
        setTimeout(() => (s.destroy(), resolve()), 50);
      });
    });
    await new Promise((r) => setTimeout(r, 50));
    const res = await fetch(`${base}/big`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: payload(3) });
    expect(await res.json()).toEqual({ count: 3, last: 2 });
    expect(seen).toBe(before + 1);
  });
});
