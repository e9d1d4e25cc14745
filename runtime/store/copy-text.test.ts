import { describe, expect, it } from 'vitest';
import { copyText, copyValue } from './copy-text.js';

describe('COPY text', () => {
  it('writes each value as COPY reads it back', () => {
    expect(copyValue('plain')).toBe('plain');
    expect(copyValue('tab\there, line\nthere, cr\r, back\\slash')).toBe('tab\\there, line\\nthere, cr\\r, back\\\\slash');
    // A string that looks like a marker stays a string: its backslash is escaped.
    expect(copyValue('\\N')).toBe('\\\\N');
    expect(copyValue('\\.')).toBe('\\\\.');
    expect([copyValue(undefined), copyValue(null)]).toEqual(['\\N', '\\N']);
    expect([copyValue(true), copyValue(false)]).toEqual(['t', 'f']);
    expect([copyValue(42), copyValue(1.5), copyValue(2 ** 53 - 1)]).toEqual(['42', '1.5', '9007199254740991']);
    // What JSON writes as null is NULL here too.
    expect([copyValue(NaN), copyValue(Infinity)]).toEqual(['\\N', '\\N']);
  });

  it('separates fields with tabs and ends every row with a newline', () => {
    expect(copyText([])).toBe('');
    expect(
      copyText([
        ['a', 1, true],
        ['b\tc', undefined, false],
      ]),
    ).toBe('a\t1\tt\nb\\tc\t\\N\tf\n');
  });
});
