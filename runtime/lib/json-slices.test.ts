import { describe, expect, it } from 'vitest';
import { parseJsonInSlices, SLICED_PARSE_MIN_BYTES } from './json-slices.js';

/** Pads a top-level object past the size where slicing starts, keeping it equal under JSON.parse. */
const big = (text: string): string => {
  const pad = ' '.repeat(SLICED_PARSE_MIN_BYTES);
  return text.replace(/^(\s*)\{/, `$1{${pad}`);
};
const both = async (text: string) => {
  let native: unknown;
  let nativeErr: unknown;
  try {
    native = JSON.parse(text.replace(/^\uFEFF/, ''));
  } catch (e) {
    nativeErr = e;
  }
  let sliced: unknown;
  let slicedErr: unknown;
  try {
    sliced = await parseJsonInSlices(Buffer.from(text), { sliceMs: 0 });
  } catch (e) {
    slicedErr = e;
  }
  return { native, nativeErr, sliced, slicedErr };
};

const VALID = [
  '{}',
  '{ }',
  '{"a":1}',
  '{"users":[],"groups":[ ]}',
  '{"users":[{"a":"x]}\\"[{"},{"b":[1,[2,[3]]]},"s",1.5e3,-0,true,false,null],"n":null}',
  '{"k\\"ey":"v\\\\","a":{"b":{"c":"}"}},"t":true , "f" : false ,"z":-12.5E-2}',
  '{"esc":"\\u0041\\n\\t\\\\\\"","uni":"žluť 😀"}',
  '{"dup":1,"dup":2}',
  '{"__proto__":{"polluted":true},"x":[{"__proto__":1}]}',
  '\uFEFF{"bom":true}',
  '\r\n\t{"ws" :\n[ 1 ,\n2 ]\n}\n',
];
const MALFORMED = [
  '{"a":1,}',
  '{"a":[1,2,]}',
  '{"a":[1 2]}',
  '{"a" 1}',
  '{a:1}',
  '{"a":1}x',
  '{"a":1',
  '{"a":"unterminated}',
  '{"a":[{"b":1}',
  '{"a":tru}',
  '{"a":01}',
  '{"a":"bad \\x escape"}',
  '{"a":"raw \u0001 control"}',
  '{"a":[1],"b"}',
  '{,}',
];

describe('parseJsonInSlices', () => {
  it.each(VALID)('equals JSON.parse, small and sliced: %s', async (text) => {
    for (const t of [text, big(text)]) {
      const r = await both(t);
      expect(r.nativeErr).toBeUndefined();
      expect(r.slicedErr).toBeUndefined();
      expect(r.sliced).toStrictEqual(r.native);
      expect(Object.getPrototypeOf(r.sliced)).toBe(Object.prototype);
    }
  });

  it('a "__proto__" member is an own property, as JSON.parse makes it, never the prototype', async () => {
    const v = (await parseJsonInSlices(Buffer.from(big('{"__proto__":{"polluted":true}}')))) as Record<string, unknown>;
    expect(Object.prototype.hasOwnProperty.call(v, '__proto__')).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((v as { polluted?: boolean }).polluted).toBeUndefined();
  });

  it.each(MALFORMED)('refuses what JSON.parse refuses, small and sliced: %s', async (text) => {
    for (const t of [text, big(text)]) {
      const r = await both(t);
      expect(r.nativeErr, t.slice(-40)).toBeInstanceOf(SyntaxError);
      expect(r.slicedErr, t.slice(-40)).toBeInstanceOf(SyntaxError);
    }
  });

  it('hands each array element and each other member to the callbacks, in order, small or sliced', async () => {
    for (const t of ['{"users":[{"i":0},{"i":1}],"tenantId":"t"}', big('{"users":[{"i":0},{"i":1}],"tenantId":"t"}')]) {
      const seen: string[] = [];
      await parseJsonInSlices(Buffer.from(t), {
        onElement: (v, k, n) => seen.push(`${k}[${n}]=${JSON.stringify(v)}`),
        onMember: (v, k) => seen.push(`${k}=${JSON.stringify(v)}`),
      });
      expect(seen).toEqual(['users[0]={"i":0}', 'users[1]={"i":1}', 'tenantId="t"']);
    }
  });

  it('gives the event loop turns while it parses a large body', async () => {
    const users = Array.from({ length: 60_000 }, (_, i) => ({
      externalId: `u${i}`,
      userName: `user${i}@example.com`,
      name: { givenName: 'A', familyName: 'B' },
    }));
    const body = Buffer.from(JSON.stringify({ tenantId: 't', users }));
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const v = (await parseJsonInSlices(body, { sliceMs: 2 })) as { users: unknown[] };
    clearInterval(timer);
    expect(v.users).toHaveLength(60_000);
    expect(v.users[59_999]).toEqual(users[59_999]);
    // One JSON.parse would have given none: the timer runs only between slices.
    expect(ticks).toBeGreaterThan(3);
  });
});
