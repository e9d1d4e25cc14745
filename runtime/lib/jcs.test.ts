import { describe, expect, it } from 'vitest';
import { argsDigest, canonicalJson } from './jcs.js';

describe('RFC 8785 canonical JSON', () => {
  it('sorts keys by UTF-16 code units, drops whitespace, writes numbers as ECMAScript does', () => {
    // The RFC's own sorting example (3.2.3) and number forms (Appendix B).
    expect(
      canonicalJson({ '\u20ac': 'Euro Sign', '\r': 'Carriage Return', '\ufb33': 'Hebrew', '1': 'One', '\ud83d\ude00': 'Emoji', '\u0080': 'Control' }),
    ).toBe('{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u20ac":"Euro Sign","\ud83d\ude00":"Emoji","\ufb33":"Hebrew"}');
    expect(canonicalJson({ b: [1e21, 0.000001, -0, 1.5e-7], a: { y: null, x: true } })).toBe('{"a":{"x":true,"y":null},"b":[1e+21,0.000001,0,1.5e-7]}');
  });
  it('digests equal arguments equally whatever their key order', () => {
    expect(argsDigest({ message: 'hi', n: 1 })).toBe(argsDigest({ n: 1, message: 'hi' }));
    // sha256('{}')
    expect(argsDigest(undefined)).toBe('44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a');
  });
});
