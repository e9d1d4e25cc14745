/**
 * Optional org-wide policy-engine veto (SPEC 4.1, OPA_URL). After the inline rules allow, the
 * facts go to OPA's data API as `{input: {...}}`; only `{"result": true}` lets the request
 * through. false, an undefined document (no `result`), a non-boolean, an HTTP error, a bad body
 * or a timeout all deny (fail closed). Keep-alive connections: this is on the hot path.
 */
import { Agent, request } from 'undici';
import { errMsg } from '../lib/log.js';
import type { OpaPort } from './decision/types.js';

export interface OpaOptions {
  /** Data API URL of the decision document, e.g. http://opa:8181/v1/data/writ/allow. */
  url: string;
  /** Whole-request timeout (default 500 ms). */
  timeoutMs?: number;
  /** Largest response body read (default 64 KiB). */
  maxBodyBytes?: number;
}

export interface OpaClient extends OpaPort {
  close(): Promise<void>;
}

export function createOpaClient(o: OpaOptions): OpaClient {
  const url = new URL(o.url);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`OPA_URL must be http(s), got ${o.url}`);
  const timeoutMs = o.timeoutMs ?? 500;
  const maxBody = o.maxBodyBytes ?? 64 * 1024;
  const dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 64 });

  return {
    async evaluate(input) {
      try {
        const res = await request(url, {
          method: 'POST',
          dispatcher,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ input }),
          signal: AbortSignal.timeout(timeoutMs),
        });
        const chunks: Buffer[] = [];
        let size = 0;
        for await (const c of res.body) {
          size += (c as Buffer).length;
          if (size > maxBody) {
            res.body.destroy();
            return { allow: false, reason: 'policy engine response too large' };
          }
          chunks.push(c as Buffer);
        }
        if (res.statusCode !== 200) return { allow: false, reason: `policy engine answered HTTP ${res.statusCode}` };
        let doc: unknown;
        try {
          doc = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          return { allow: false, reason: 'policy engine answered invalid JSON' };
        }
        if (typeof doc !== 'object' || doc === null || !('result' in doc)) {
          return { allow: false, reason: 'policy undefined (no result)' };
        }
        const result = (doc as { result: unknown }).result;
        if (typeof result !== 'boolean') return { allow: false, reason: 'policy result is not a boolean' };
        return result ? { allow: true, reason: 'policy allowed' } : { allow: false, reason: 'policy denied' };
      } catch (e) {
        const name = (e as { name?: string }).name;
        if (name === 'TimeoutError' || name === 'AbortError') return { allow: false, reason: `policy engine timed out after ${timeoutMs} ms` };
        return { allow: false, reason: `policy engine unreachable: ${errMsg(e)}` };
      }
    },
    close: () => dispatcher.close(),
  };
}
