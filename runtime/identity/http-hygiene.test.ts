/**
 * HTTP hygiene of the identity authority (issue 15 item 6), over raw sockets: when it answers
 * before reading a request body (413 over the body limit, 503 before the issuer key is loaded,
 * a route that ignores bodies, a validation error), it either reads the rest or says
 * `Connection: close` and closes, as the other listeners do. It never answers keep-alive and then
 * drops the client's next request on that connection.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../store/factory.js';
import { openTestPglite } from '../store/testing.js';
import { startIdentityAuthority } from './server.js';

interface Answer {
  status: number;
  headers: Record<string, string>;
}

/** Writes `first` (head + body) and then a GET on the same socket; parses what comes back until close. */
function twoOnOneSocket(port: number, head: string, body: Buffer): Promise<{ answers: Answer[]; closed: boolean }> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let data = '';
    let closed = false;
    const done = () => {
      clearTimeout(timer);
      s.destroy();
      const answers: Answer[] = [];
      for (const m of data.matchAll(/HTTP\/1\.1 (\d{3})[^\r]*\r\n((?:[^\r]+\r\n)*)\r\n/g)) {
        const headers: Record<string, string> = {};
        for (const line of m[2]!.split('\r\n').filter(Boolean)) {
          const i = line.indexOf(':');
          headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
        }
        answers.push({ status: Number(m[1]), headers });
      }
      resolve({ answers, closed });
    };
    const timer = setTimeout(done, 3000);
    s.on('data', (d) => {
      data += d.toString('latin1');
      if ((data.match(/HTTP\/1\.1 /g) ?? []).length >= 2 && /\{"status":"ok"\}$/.test(data)) done();
    });
    s.on('close', () => {
      closed = true;
      done();
    });
    s.on('error', () => {});
    s.write(head);
    s.write(body, () => s.write('GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n'));
  });
}

/** Fine: the next request was answered, or the early answer said `close` (the client will not reuse the socket). */
function expectNoDroppedRequest(r: { answers: Answer[] }, what: string) {
  expect(r.answers.length, what).toBeGreaterThanOrEqual(1);
  const first = r.answers[0]!;
  if (r.answers.length >= 2) expect(r.answers[1]!.status, what).toBe(200);
  else expect(first.headers.connection, `${what}: answered ${first.status} keep-alive, then dropped the next request`).toBe('close');
}

describe('identity authority closes properly on early answers', () => {
  let store: Store;
  let srv: Awaited<ReturnType<typeof startIdentityAuthority>>;

  beforeAll(async () => {
    store = await openTestPglite();
    srv = await startIdentityAuthority({ store, addr: '127.0.0.1:0' });
    await srv.authority.whenReady();
  });
  afterAll(async () => {
    await srv?.close();
    await store?.close();
  });

  it('413 over the body limit (declared length, body sent)', async () => {
    const body = Buffer.alloc(2 * 1024 * 1024, 'a');
    const head = `POST /v1/keys HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    const r = await twoOnOneSocket(srv.port, head, body);
    expect(r.answers[0]?.status).toBe(413);
    expectNoDroppedRequest(r, '413');
  });

  it('413 over the body limit (chunked, no declared length)', async () => {
    const chunk = Buffer.alloc(256 * 1024, 'a');
    const parts: Buffer[] = [];
    for (let i = 0; i < 8; i++) parts.push(Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n'));
    parts.push(Buffer.from('0\r\n\r\n'));
    const head = 'POST /v1/keys HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n';
    const r = await twoOnOneSocket(srv.port, head, Buffer.concat(parts));
    expect(r.answers[0]?.status).toBe(413);
    expectNoDroppedRequest(r, 'chunked 413');
  });

  it('a route that ignores its body, and a body that fails validation', async () => {
    const body = Buffer.alloc(512 * 1024, ' ');
    const ignore = await twoOnOneSocket(srv.port, `GET /v1/agents HTTP/1.1\r\nHost: t\r\nContent-Length: ${body.length}\r\n\r\n`, body);
    expect(ignore.answers[0]?.status).toBe(200);
    expectNoDroppedRequest(ignore, 'ignored body');
    const bad = Buffer.from(`{"name": 5, "pad": "${'x'.repeat(300 * 1024)}"}`);
    const invalid = await twoOnOneSocket(
      srv.port,
      `POST /v1/keys HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: ${bad.length}\r\n\r\n`,
      bad,
    );
    expect(invalid.answers[0]?.status).toBe(422);
    expectNoDroppedRequest(invalid, '422');
  });
});
