import { describe, expect, it } from 'vitest';
import { isOwnDeadPredecessor, parseHolder, thisHolder, type Holder } from './predecessor.js';

const me: Holder = { identity: 'cp-0', boot: 'b1', netNs: 'net:[1]', pidNs: 'pid:[1]', pid: 7 };
const dead = () => false;
const alive = () => true;

describe('audit lease: own dead predecessor', () => {
  it('the same process slot restarted (same identity, boot, namespaces; its pid gone or now ours) is taken back', () => {
    expect(isOwnDeadPredecessor({ ...me, pid: 6 }, me, dead)).toBe(true);
    expect(isOwnDeadPredecessor({ ...me }, me, alive)).toBe(true); // pid reused by this very process
    // A container restart in its pod: same network namespace, a new pid namespace.
    expect(isOwnDeadPredecessor({ ...me, pidNs: 'pid:[0]', pid: 1 }, me, alive)).toBe(true);
  });

  it('a live holder, another identity, node, boot or pod, or anything unknown is never taken over', () => {
    expect(isOwnDeadPredecessor({ ...me, pid: 6 }, me, alive)).toBe(false);
    expect(isOwnDeadPredecessor({ ...me, pid: 6, identity: 'cp-1' }, me, dead)).toBe(false);
    expect(isOwnDeadPredecessor({ ...me, pid: 6, boot: 'b0' }, me, dead)).toBe(false);
    expect(isOwnDeadPredecessor({ ...me, pid: 6, netNs: 'net:[2]' }, me, dead)).toBe(false);
    expect(isOwnDeadPredecessor(undefined, me, dead)).toBe(false);
    expect(isOwnDeadPredecessor(me, undefined, dead)).toBe(false);
  });

  it('reads a stored holder only in its exact shape', () => {
    expect(parseHolder(JSON.stringify(me))).toEqual(me);
    for (const bad of [null, '', 'nope', '{}', JSON.stringify({ ...me, pid: 0 }), JSON.stringify({ ...me, boot: '' })])
      expect(parseHolder(bad)).toBeUndefined();
  });

  it('this process on Linux: its pid and kernel facts', () => {
    const h = thisHolder('cp-0');
    expect(h).toMatchObject({
      identity: 'cp-0',
      pid: process.pid,
      netNs: expect.stringMatching(/^net:\[\d+\]$/),
      pidNs: expect.stringMatching(/^pid:\[\d+\]$/),
    });
    expect(h!.boot).toMatch(/^[0-9a-f-]{36}$/);
  });
});
