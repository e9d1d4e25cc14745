/** Test helper: the enterprise routes on a real node:http server at 127.0.0.1:<ephemeral>. */
import type http from 'node:http';
import { createAdaptorServer } from '@hono/node-server';
import { createApi } from '../../../lib/api.js';
import { close as closeServer, listen } from '../../../lib/http.js';
import type { Store } from '../../../store/factory.js';
import { enterpriseRoutes, SYNC_BODY_LIMIT } from '../index.js';
import { loadConfig } from '../../../lib/settings.js';

export interface Served {
  url: string;
  post(path: string, body?: unknown): Promise<{ status: number; body: any; text: string }>;
  get(path: string): Promise<{ status: number; body: any; text: string }>;
  close(): Promise<void>;
}

export async function serve(store: Store, now: () => number, env: Record<string, string> = {}): Promise<Served> {
  const app = createApi({ bodyLimit: SYNC_BODY_LIMIT });
  app.route('/', enterpriseRoutes({ store, now, config: loadConfig(env).identity }));
  const server = createAdaptorServer({ fetch: app.fetch }) as http.Server;
  const port = await listen(server, '127.0.0.1:0');
  const url = `http://127.0.0.1:${port}`;
  const read = async (r: Response) => {
    const text = await r.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    return { status: r.status, body: body as any, text };
  };
  return {
    url,
    post: async (path, body) =>
      read(
        await fetch(url + path, {
          method: 'POST',
          headers: body === undefined ? {} : { 'content-type': 'application/json' },
          body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
        }),
      ),
    get: async (path) => read(await fetch(url + path)),
    close: () => closeServer(server),
  };
}
