/** The refusal's words (worst-case.ts): what a caller whose call never fits can change. */
import { describe, expect, it } from 'vitest';
import { refusal } from './worst-case.js';

describe('a worst case over the whole budget', () => {
  it('tells a model call what to ask for, and a tool call that its price is over the budget', () => {
    const cases: [string, Parameters<typeof refusal>, string][] = [
      [
        'model tokens',
        ['a1', 'tokensPerHour', 100, 210],
        'tokensPerHour budget of agent a1: this call needs up to 210 of 100 tokens per hour, more than the whole budget: it never fits; ask for fewer tokens (a lower max_tokens, a shorter prompt)',
      ],
      [
        'model dollars',
        ['a1', 'costUsdPerDay', 1, 2.5],
        'costUsdPerDay budget of agent a1: this call needs up to 2.5 of 1 USD per day, more than the whole budget: it never fits; ask for fewer dollars (a lower max_tokens, a cheaper model)',
      ],
      [
        'tool price',
        ['a1', 'costUsdPerDay', 1, 2.5, undefined, true],
        "costUsdPerDay budget of agent a1: this call needs up to 2.5 of 1 USD per day, more than the whole budget: it never fits; the tool's costUsd is more than the agent's whole costUsdPerDay",
      ],
      [
        'fits later',
        ['a1', 'costUsdPerDay', 1, 0.5, { used: 0.75 }, true],
        'costUsdPerDay budget of agent a1: this call needs up to 0.5 of 1 USD per day and 0.75 are used or reserved',
      ],
    ];
    for (const [name, args, message] of cases) expect([name, refusal(...args).message]).toEqual([name, message]);
  });
});
