/**
 * The kind e2e's hands: which tools are missing, running kind/kubectl/helm/docker against one
 * throwaway cluster (its own kubeconfig file), port-forwards, and manifests applied from strings.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Why the kind e2e cannot run here, or undefined when docker (with an engine), kind, kubectl and helm are all present. */
export async function missingTools(): Promise<string | undefined> {
  const probes: [string, string[], string][] = [
    ['docker', ['info', '--format', '{{.ServerVersion}}'], 'docker cannot reach a container engine'],
    ['kind', ['version'], 'kind is not installed'],
    ['kubectl', ['version', '--client'], 'kubectl is not installed'],
    ['helm', ['version', '--short'], 'helm is not installed'],
  ];
  const missing: string[] = [];
  for (const [cmd, args, why] of probes) {
    try {
      await run(cmd, args, { timeout: 20_000 });
    } catch (e) {
      missing.push((e as { code?: string }).code === 'ENOENT' ? `${cmd} is not installed` : why);
    }
  }
  return missing.length ? missing.join('; ') : undefined;
}

export interface Cluster {
  name: string;
  kubeconfig: string;
  kubectl(args: string[], opts?: { input?: string; allowFail?: boolean; timeoutMs?: number }): Promise<{ code: number; stdout: string; stderr: string }>;
  helm(args: string[]): Promise<string>;
  apply(manifest: string, namespace?: string): Promise<{ code: number; stdout: string; stderr: string }>;
  /** `kubectl port-forward` to a Service; resolves with the local port. */
  portForward(namespace: string, target: string, port: number): Promise<{ port: number; close(): void }>;
}

/** Runs a command, returning code and output (throws on failure unless allowFail). */
export function sh(
  cmd: string,
  args: string[],
  opts: { input?: string; allowFail?: boolean; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: opts.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 10 * 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      const r = { code: code ?? -1, stdout, stderr };
      if (r.code !== 0 && !opts.allowFail) reject(new Error(`${cmd} ${args.join(' ')} exited ${r.code}:\n${stderr || stdout}`));
      else resolve(r);
    });
    child.stdin.end(opts.input ?? '');
  });
}

export function cluster(name: string, kubeconfig: string): Cluster {
  const kubectl: Cluster['kubectl'] = (args, opts = {}) => sh('kubectl', ['--kubeconfig', kubeconfig, ...args], opts);
  return {
    name,
    kubeconfig,
    kubectl,
    helm: async (args) => (await sh('helm', ['--kubeconfig', kubeconfig, ...args], { timeoutMs: 15 * 60_000 })).stdout,
    apply: (manifest, namespace) => kubectl([...(namespace ? ['-n', namespace] : []), 'apply', '-f', '-'], { input: manifest, allowFail: true }),
    portForward(namespace, target, port) {
      const child: ChildProcess = spawn('kubectl', ['--kubeconfig', kubeconfig, '-n', namespace, 'port-forward', target, `:${port}`], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          child.kill();
          reject(new Error(`port-forward ${target} did not start`));
        }, 60_000);
        child.on('exit', (code) => reject(new Error(`port-forward ${target} exited ${code}`)));
        createInterface({ input: child.stdout! }).on('line', (line) => {
          const m = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(line);
          if (!m) return;
          clearTimeout(timer);
          resolve({ port: Number(m[1]), close: () => child.kill() });
        });
      });
    },
  };
}

/** Polls `fn` until it returns a value (not undefined) or `timeoutMs` passes. */
export async function eventually<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 180_000, everyMs = 2000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
