/**
 * e2e: the folder source in `npm start`'s stack (startWrit, ephemeral ports, a temp folder as
 * WRIT_POLICY_DIR): saving a YAML file changes the /authz decision without a restart, deleting
 * it withdraws the grant. Reports the p50 file-save-to-decision latency (generous bound only).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { H } from '../runtime/lib/brand.js';
import { startWrit, type Writ } from '../runtime/main.js';

const doc = (isPublic: boolean) =>
  `# edited by e2e/folder.test.ts\napiVersion: writ.io/v1alpha1\nkind: RegistryService\nmetadata:\n  name: storefront\n  namespace: shop\nspec:\n  upstream: storefront.shop.svc:8080\n  public: ${isPublic}\n  kind: service\n`;

describe('folder source in the all-in-one stack', () => {
  let writ: Writ;
  let root: string;
  let policyDir: string;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'writ-e2e-folder-'));
    policyDir = join(root, 'policies');
    (await import('node:fs')).mkdirSync(join(policyDir, 'nested'), { recursive: true });
    writeFileSync(join(policyDir, 'nested', 'storefront.yaml'), doc(true));
    writ = await startWrit({
      PATH: process.env.PATH,
      WRIT_DATA_DIR: join(root, 'data'),
      WRIT_POLICY_DIR: policyDir,
      PORT: '0',
      DECISION_ADDR: '127.0.0.1:0',
      MGMT_ADDR: '127.0.0.1:0',
      EGRESS_PROXY_ADDR: '127.0.0.1:0',
      BROKER_ENABLED: 'false',
      LOG_LEVEL: 'warn',
    });
  });
  afterAll(async () => {
    await writ?.close();
    rmSync(root, { recursive: true, force: true });
  });

  const decide = async () => (await fetch(`http://127.0.0.1:${writ.ports.decision}/authz`, { headers: { [H.service]: 'storefront' } })).status;

  /** Writes (or deletes) and polls /authz until its status satisfies `done`; returns ms taken. */
  async function saveAndWait(change: () => void, done: (status: number) => boolean): Promise<number> {
    const t0 = performance.now();
    change();
    const end = t0 + 20_000;
    for (;;) {
      if (done(await decide())) return performance.now() - t0;
      if (performance.now() > end) throw new Error('the decision did not follow the file within 20 s');
      await new Promise((r) => setTimeout(r, 2));
    }
  }

  it('edit -> the decision changes; delete -> the grant is gone; p50 save-to-decision latency', async () => {
    const file = join(policyDir, 'nested', 'storefront.yaml');
    expect(await decide()).toBe(200); // public: anonymous callers allowed
    const mgmt = await fetch(`http://127.0.0.1:${writ.ports.mgmt}/v1/registry/services/web`);
    expect(mgmt.status).toBe(404); // WRIT_POLICY_DIR replaces the examples

    const times: number[] = [];
    for (let i = 0; i < 10; i++) {
      const pub = i % 2 === 1;
      times.push(
        await saveAndWait(
          () => writeFileSync(file, doc(pub)),
          (s) => (pub ? s === 200 : s !== 200),
        ),
      );
    }
    expect(await decide()).toBe(200);
    times.push(
      await saveAndWait(
        () => rmSync(file),
        (s) => s !== 200,
      ),
    );
    expect(await decide()).not.toBe(200);
    const sorted = [...times].sort((a, b) => a - b);
    const p50 = sorted[Math.floor(sorted.length / 2)]!;
    console.log(`folder source: file-save-to-decision p50 ${p50.toFixed(1)} ms, max ${sorted.at(-1)!.toFixed(1)} ms over ${times.length} saves`);
    expect(p50).toBeLessThan(10_000);
  });
});
