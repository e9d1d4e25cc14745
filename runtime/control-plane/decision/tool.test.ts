/**
 * The tool layer's pure parts: what an allowTools entry covers, list-time filtering, how methods
 * are treated, a tool rule refused where it is applied (registry schema, operator check), and a
 * tool's price from the registry entry (and from a RegistryService) to the call.
 */
import { describe, expect, it } from 'vitest';
import { reconcile } from '../../../operator/reconcile.js';
import { checkResource } from '../../../operator/resource.js';
import { parseService, RegistryValidationError } from '../registry/service.js';
import type { Service } from '../types.js';
import { covers, filterTools, mayList, methodClass, toolPrice } from './tool.js';

const agent = (allowTools: string[]): Service => ({ name: 'a', upstream: 'a:1', kind: 'agent', allowTools });

describe('tool layer', () => {
  it('reads <service>, <service>/<tool> and <service>/<prefix>* entries', () => {
    expect(covers('fs', 'fs', 'anything')).toBe(true);
    expect(covers('fs/read', 'fs', 'read')).toBe(true);
    expect(covers('fs/read', 'fs', 'read2')).toBe(false);
    expect(covers('fs/get-*', 'fs', 'get-env')).toBe(true);
    expect(covers('fs/get-*', 'fs', 'put')).toBe(false);
    expect(covers('fsx/read', 'fs', 'read')).toBe(false);
    expect(covers('fs2', 'fs', 'read')).toBe(false);
  });

  it('filters a tools/list answer to the names the agent may call', () => {
    const tools = [{ name: 'echo' }, { name: 'get-env' }, { name: 'get-sum' }, { name: 'zip' }, { nameless: true }];
    expect(filterTools(agent(['fs/echo', 'fs/get-s*']), 'fs', tools)).toEqual([{ name: 'echo' }, { name: 'get-sum' }]);
    expect(filterTools(agent(['fs']), 'fs', tools)).toHaveLength(4);
    expect(filterTools(agent(['other/echo']), 'fs', tools)).toEqual([]);
  });

  it('lists exactly the names an allowTools entry covers', () => {
    const names = ['read', 'read2', 'get-env', 'put', '', '*', 'fs'];
    const rows: [string[], string[]][] = [
      [['fs'], names],
      [['fs/read'], ['read']],
      [
        ['fs/get-*', 'fs/put'],
        ['get-env', 'put'],
      ],
      [['fs/*'], names],
      [['fs/', 'fsx/read', 'fs2', 'other'], []],
      [[], []],
    ];
    for (const [allowTools, listed] of rows) {
      expect(names.filter(mayList(agent(allowTools), 'fs'))).toEqual(listed);
      expect(names.filter((n) => allowTools.some((e) => covers(e, 'fs', n)))).toEqual(listed);
    }
    expect(mayList(undefined, 'fs')('read')).toBe(false);
  });

  it('decides calls, passes handshakes, lists and notifications, denies anything else', () => {
    expect(['tools/call', 'resources/read', 'prompts/get'].map(methodClass)).toEqual(['decided', 'decided', 'decided']);
    expect(['initialize', 'ping', 'tools/list', 'notifications/initialized', 'response', 'stream', 'end'].map(methodClass)).toEqual(Array(7).fill('pass'));
    expect(methodClass('tools/execute')).toBe('unknown');
  });

  it('refuses at apply a `when` that does not compile or reads what a call cannot see', () => {
    const bad = (when: string) => () => parseService({ name: 'a', upstream: 'a:1', kind: 'agent', toolRules: [{ tool: 'fs/echo', when }] });
    expect(bad('args.n <')).toThrow(RegistryValidationError);
    expect(bad('result.ok')).toThrow(/Unknown variable: result \(a call-time rule sees only args, agent, task, onBehalfOf\)/);
    expect(bad('1 + 1')).toThrow(/evaluates to int, not bool/);
    expect(parseService({ name: 'a', upstream: 'a:1', kind: 'agent', toolRules: [{ tool: 'fs/echo', when: 'args.n < 3' }] }).toolRules).toEqual([
      { tool: 'fs/echo', when: 'args.n < 3' },
    ]);
    const doc = (when: string) => ({
      apiVersion: 'writ.io/v1alpha1',
      kind: 'AgentPolicy',
      metadata: { name: 'p' },
      spec: { agent: 'a', allowTools: ['fs/echo'], toolRules: [{ tool: 'fs/echo', when }] },
    });
    expect(checkResource(doc('request.path == "/"'), 'x.yaml:1').observed?.errors).toEqual([
      'spec.toolRules[0].when: does not compile as a call-time rule: Unknown variable: request (a call-time rule sees only args, agent, task, onBehalfOf)',
    ]);
    expect(checkResource(doc('args.n < 3'), 'x.yaml:1').observed?.errors).toEqual([]);
  });

  it('prices a tools/call from its service entry: non-negative finite numbers, once per tool, on MCP services only', () => {
    const mcp = (tools: unknown) => ({ name: 'fs', upstream: 'fs:1', kind: 'tool', protocol: 'mcp', tools });
    const refused = (body: unknown) => {
      try {
        parseService(body);
        return 'accepted';
      } catch (e) {
        return (e as Error).message;
      }
    };
    expect(
      [
        mcp([{ name: 'echo', costUsd: -1 }]),
        mcp([{ name: 'echo', costUsd: '1' }]),
        mcp([{ name: 'echo', costUsd: 2e6 }]),
        mcp([{ name: 'echo' }]),
        mcp([{ name: '', costUsd: 1 }]),
        mcp([{ name: 'echo', costUsd: 1, per: 'call' }]),
        mcp([
          { name: 'echo', costUsd: 1 },
          { name: 'echo', costUsd: 2 },
        ]),
        { name: 'fs', upstream: 'fs:1', kind: 'tool', tools: [{ name: 'echo', costUsd: 1 }] },
      ].map(refused),
    ).toEqual([
      'invalid service: tools.0.costUsd: Too small: expected number to be >=0',
      'invalid service: tools.0.costUsd: Invalid input: expected number, received string',
      'invalid service: tools.0.costUsd: Too big: expected number to be <=1000000',
      'invalid service: tools.0.costUsd: Invalid input: expected number, received undefined',
      'invalid service: tools.0.name: Too small: expected string to have >=1 characters',
      'invalid service: tools.0: Unrecognized key: "per"',
      'invalid service: tools.1.name: duplicate tool "echo"',
      'invalid service: tools: tools are for protocol mcp',
    ]);
    const fs = parseService(mcp([{ name: 'echo', costUsd: 0.25 }]));
    expect(fs.tools).toEqual([{ name: 'echo', costUsd: 0.25 }]);
    expect(toolPrice(fs, { method: 'tools/call', name: 'echo' })).toBe(0.25);
    expect(toolPrice(fs, { method: 'tools/call', name: 'zip' })).toBe(0);
    expect(toolPrice(fs, { method: 'prompts/get', name: 'echo' })).toBe(0);
    // A RegistryService carries the prices to the registry entry; a negative price is refused by the CRD schema.
    const doc = (tools: unknown, protocol = 'mcp') => ({
      apiVersion: 'writ.io/v1alpha1',
      kind: 'RegistryService',
      metadata: { name: 'fs', namespace: 't' },
      spec: { upstream: 'fs:1', kind: 'tool', protocol, tools },
    });
    const ok = checkResource(doc([{ name: 'echo', costUsd: 0.25 }]), 'x.yaml:1').observed!;
    expect(ok.errors).toEqual([]);
    expect(reconcile([ok]).services[0]).toMatchObject({ name: 'fs', protocol: 'mcp', tools: [{ name: 'echo', costUsd: 0.25 }] });
    expect(checkResource(doc([{ name: 'echo', costUsd: -1 }]), 'x.yaml:1').observed?.errors).toEqual(['spec.tools[0].costUsd: must be >= 0, got -1']);
  });
});
