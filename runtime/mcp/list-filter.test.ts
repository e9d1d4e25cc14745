import { describe, expect, it } from 'vitest';
import { filterListAnswer, filterListEvents, UnreadableList } from './list-filter.js';

/** The agent may see `echo` and every `get-*` tool. */
const may = (name: string) => name === 'echo' || name.startsWith('get-');
const filter = (answer: string) => filterListAnswer(Buffer.from(answer), may).toString('utf8');

describe('filterListAnswer: tools/list answers cut to what the agent may see', () => {
  it.each([
    [
      'compact: kept tools keep their bytes',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"get-env"},{"name":"rm"}]}}',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"get-env"}]}}',
    ],
    [
      'pretty-printed: the answer around the array and each kept tool as sent',
      '{\n  "jsonrpc": "2.0",\n  "id": 1,\n  "result": {\n    "tools": [\n      { "name": "rm" },\n      { "name" : "echo" }\n    ],\n    "nextCursor": "x"\n  }\n}\n',
      '{\n  "jsonrpc": "2.0",\n  "id": 1,\n  "result": {\n    "tools": [{ "name" : "echo" }],\n    "nextCursor": "x"\n  }\n}\n',
    ],
    ['none kept', '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"rm"}]}}', '{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}'],
    ['an empty list', '{"jsonrpc":"2.0","id":1,"result":{"tools":[ ]}}', '{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}'],
    [
      'an escaped name is read as JSON reads it',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get\\u002dsum"},{"name":"ec\\"ho"}]}}',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"get\\u002dsum"}]}}',
    ],
    [
      'a name nested in a tool is not its name',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"inputSchema":{"name":"echo"},"name":"rm"},{"annotations":{"title":"x"},"name":"echo"}]}}',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"annotations":{"title":"x"},"name":"echo"}]}}',
    ],
    [
      'a tool without a string name, and what is not a tool, are dropped',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":7},{"title":"echo"},"echo",["echo"],null,{"name":"echo"}]}}',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"}]}}',
    ],
    [
      'strings holding brackets and quotes do not move the scan',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"rm","description":"]}{\\"name\\":\\"echo\\"}["},{"name":"echo","description":"a \\\\"}]}}',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","description":"a \\\\"}]}}',
    ],
    [
      'a dropped tool is never read, so what it holds does not matter',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"rm","x":NaN},{"name":"echo"}]}}',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"}]}}',
    ],
    [
      'an answer to any id is filtered',
      '{"jsonrpc":"2.0","id":"other","result":{"tools":[{"name":"rm"},{"name":"echo"}]}}',
      '{"jsonrpc":"2.0","id":"other","result":{"tools":[{"name":"echo"}]}}',
    ],
  ])('%s', (_, answer, expected) => {
    expect(filter(answer)).toBe(expected);
  });

  it.each([
    [
      'a tool naming itself twice: JSON.parse takes the last name (escaped here)',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","n\\u0061me":"rm"},{"name":"rm","name":"echo"}]}}',
      { jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'echo' }] } },
    ],
    [
      'a later result listing tools: the one JSON.parse keeps is filtered',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"}]},"result":{"tools":[{"name":"rm"},{"name":"get-x"}]}}',
      { jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'get-x' }] } },
    ],
    [
      'a later tools member',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[],"tools":[{"name":"rm"},{"name":"echo"}]}}',
      { jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'echo' }] } },
    ],
    [
      'a batch: every answer in it',
      '[{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"rm"},{"name":"echo"}]}},{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"rm"}]}}]',
      [
        { jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'echo' }] } },
        { jsonrpc: '2.0', id: 2, result: { tools: [] } },
      ],
    ],
  ])('%s', (_, answer, expected) => {
    expect(JSON.parse(filter(answer))).toEqual(expected);
  });

  it('passes an answer that lists no tools as it came', () => {
    for (const answer of [
      '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}',
      '{"jsonrpc":"2.0","id":1,"result":{"tools":"none"}}',
      '{"jsonrpc":"2.0","id":1,"result":{}}',
    ]) {
      const body = Buffer.from(answer);
      expect(filterListAnswer(body, may)).toBe(body);
    }
  });

  it.each([
    ['not JSON', 'upstream said no'],
    ['a kept tool with NaN, which lenient parsers read', '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","x":NaN}]}}'],
    ['a kept tool that is not JSON', '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","x":}]}}'],
    ['data after the answer', '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"}]}} {"result":{"tools":[{"name":"rm"}]}}'],
    ['an unterminated answer', '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo"}'],
    ['an empty body', ''],
  ])('refuses %s rather than pass it on', (_, answer) => {
    expect(() => filter(answer)).toThrow(UnreadableList);
  });

  it('agrees with JSON.parse, filter and JSON.stringify on generated answers', () => {
    let seed = 42;
    const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    const names = ['echo', 'get-sum', 'rm', 'get-env', 'x\u00e9', 'get-"q"', 'ech\\o'];
    for (let round = 0; round < 200; round++) {
      const tools = Array.from({ length: rand(12) }, (_, i) => ({
        ...(rand(3) ? { name: names[rand(names.length)] } : { title: 'none' }),
        description: `tool ${i} ]}{[ "quoted"`,
        inputSchema: { type: 'object', properties: { name: { type: 'string', enum: ['echo', '[{'] } } },
      }));
      const message = { jsonrpc: '2.0', id: round, result: { tools, nextCursor: rand(2) ? 'c' : undefined } };
      const answer = JSON.stringify(message, null, rand(2) ? 2 : undefined);
      const expected = { ...message, result: { ...message.result, tools: tools.filter((t) => 'name' in t && may(t.name!)) } };
      expect(JSON.parse(filter(answer))).toEqual(JSON.parse(JSON.stringify(expected)));
    }
  });
});

describe('filterListEvents: SSE answers', () => {
  it('filters each event that carries data and passes the rest in order', () => {
    const events =
      'id: 1\ndata: \n\n' +
      ': keep-alive\n\n' +
      'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}\n\n' +
      'event: message\nid: 2\ndata: {"jsonrpc":"2.0","id":3,\ndata: "result":{"tools":[{"name":"rm"},\ndata: {"name":"echo"}]}}\n\n';
    expect(filterListEvents(events, may)).toBe(
      'id: 1\ndata: \n\n' +
        ': keep-alive\n\n' +
        'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}\n\n' +
        'event: message\nid: 2\ndata: {"jsonrpc":"2.0","id":3,\ndata: "result":{"tools":[{"name":"echo"}]}}\n\n',
    );
  });

  it('refuses an event whose data is not JSON', () => {
    expect(() => filterListEvents('event: message\ndata: {"result":{"tools":[{"name":"rm"}]\n\n', may)).toThrow(UnreadableList);
  });
});
