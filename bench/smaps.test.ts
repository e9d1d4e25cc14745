import { describe, expect, it } from 'vitest';
import { attribute, classify, formatAttribution, formatGrowth, parseSmaps } from './smaps.js';

/** Mappings of the all-in-one at idle (/proc/<pid>/smaps, 2 Dec 2026), a few fields of each kept. */
const EXCERPT = `00b72000-025fe000 r-xp 00772000 fe:00 260689                             /usr/bin/node
Size:              27184 kB
KernelPageSize:        4 kB
Rss:               22496 kB
Pss:               22496 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me 
06c1a000-07332000 rw-p 00000000 00:00 0                                  [heap]
Size:               7264 kB
KernelPageSize:        4 kB
Rss:                6912 kB
Pss:                6912 kB
Anonymous:          6912 kB
VmFlags: rd wr mr mw me ac 
26a73da21000-26a73dc32000 rwxp 00000000 00:00 0 
Size:               2116 kB
KernelPageSize:        4 kB
Rss:                2116 kB
Pss:                2116 kB
Anonymous:          2116 kB
VmFlags: rd wr ex mr mw me dc nr 
3d676e640000-3d676e756000 rw-p 00000000 00:00 0 
Size:               1112 kB
KernelPageSize:        4 kB
Rss:                1112 kB
Pss:                1112 kB
Anonymous:          1112 kB
VmFlags: rd wr mr mw me dc nr 
7f258c000000-7f2594000000 rw-p 00000000 00:00 0 
Size:             131072 kB
KernelPageSize:        4 kB
Rss:               34052 kB
Pss:               34052 kB
Anonymous:         34052 kB
VmFlags: rd wr mr mw me dc nr 
7f2594000000-7f280c000000 ---p 00000000 00:00 0 
Size:           10354688 kB
KernelPageSize:        4 kB
Rss:                   0 kB
Pss:                   0 kB
Anonymous:             0 kB
VmFlags: mr mw me dc nr 
7f2cb0000000-7f2cb0021000 rw-p 00000000 00:00 0 
Size:                132 kB
KernelPageSize:        4 kB
Rss:                  12 kB
Pss:                  12 kB
Anonymous:            12 kB
VmFlags: rd wr mr mw me nr 
7f2cb0021000-7f2cb4000000 ---p 00000000 00:00 0 
Size:              65404 kB
KernelPageSize:        4 kB
Rss:                   0 kB
Pss:                   0 kB
Anonymous:             0 kB
VmFlags: mr mw me nr 
7f36e0000000-7f36e24b1000 rw-p 00000000 00:00 0 
Size:              37572 kB
KernelPageSize:        4 kB
Rss:               37560 kB
Pss:               37560 kB
Anonymous:         37560 kB
VmFlags: rd wr mr mw me nr 
7f36e24b1000-7f36e4000000 ---p 00000000 00:00 0 
Size:              27964 kB
KernelPageSize:        4 kB
Rss:                   0 kB
Pss:                   0 kB
Anonymous:             0 kB
VmFlags: mr mw me nr 
7f36e4000000-7f36e5ef4000 rw-p 00000000 00:00 0 
Size:              31696 kB
KernelPageSize:        4 kB
Rss:               30848 kB
Pss:               30848 kB
Anonymous:         30848 kB
VmFlags: rd wr mr mw me nr 
7f36e5ef4000-7f36e8000000 ---p 00000000 00:00 0 
Size:              33840 kB
KernelPageSize:        4 kB
Rss:                   0 kB
Pss:                   0 kB
Anonymous:             0 kB
VmFlags: mr mw me nr 
7f36ea070000-7f36ea91b000 rw-p 00000000 00:00 0 
Size:               8876 kB
KernelPageSize:        4 kB
Rss:                8876 kB
Pss:                8876 kB
Anonymous:          8876 kB
VmFlags: rd wr mr mw me ac 
7f3714c44000-7f3714d9a000 r-xp 00026000 fe:00 339380                     /usr/lib/x86_64-linux-gnu/libc.so.6
Size:               1368 kB
KernelPageSize:        4 kB
Rss:                1176 kB
Pss:                1176 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me 
7ffe10d6d000-7ffe10d8e000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
KernelPageSize:        4 kB
Rss:                  68 kB
Pss:                  68 kB
Anonymous:            68 kB
VmFlags: rd wr mr mw me gd ac 
`;

describe('smaps attribution', () => {
  const mappings = parseSmaps(EXCERPT);

  it('reads each mapping: addresses, permissions, path, resident kB', () => {
    expect(mappings.length).toBe(15);
    expect(mappings[0]).toEqual({ start: 0xb72000, end: 0x25fe000, perms: 'r-xp', path: '/usr/bin/node', rssKb: 22496 });
    expect(mappings[4]).toEqual({ start: 0x7f258c000000, end: 0x7f2594000000, perms: 'rw-p', path: '', rssKb: 34052 });
    expect(mappings[14]!.path).toBe('[stack]');
  });

  it('classifies each mapping by what it is', () => {
    const table: [string, string][] = [
      ['b72000', 'files'], // the node binary
      ['6c1a000', 'brk'], // malloc's main arena
      ['26a73da21000', 'jit'], // anonymous, executable
      ['3d676e640000', 'v8'], // anonymous below 2^46: a V8 heap page
      ['7f258c000000', 'wasm-memory'], // rw, then inaccessible: 10 GiB in all
      ['7f2594000000', 'anon'], // the reservation's inaccessible rest: nothing resident
      ['7f2cb0000000', 'arena-heap'], // a new arena: 132 kB used of its 64 MiB
      ['7f2cb0021000', 'anon'],
      ['7f36e0000000', 'arena-heap'],
      ['7f36e24b1000', 'anon'],
      ['7f36e4000000', 'arena-heap'],
      ['7f36e5ef4000', 'anon'],
      ['7f36ea070000', 'anon'], // a block malloc mapped on its own
      ['7f3714c44000', 'files'], // libc
      ['7ffe10d6d000', 'other'], // the main stack
    ];
    expect(mappings.map((m, i) => [m.start.toString(16), classify(m, mappings[i + 1])])).toEqual(table);
  });

  it('adds up the resident kB per share', () => {
    expect(attribute(mappings)).toEqual({
      kb: { wasm: 34052, v8: 1112, arenas: 12 + 37560 + 30848, brk: 6912, anon: 8876, jit: 2116, files: 22496 + 1176, other: 68 },
      wasmMemories: 1,
      arenaHeaps: 3,
    });
  });

  it('an rw mapping not followed by its reservation, or not 64 MiB-aligned, is neither WASM nor an arena', () => {
    const lone = parseSmaps('7f36e4000000-7f36e5ef4000 rw-p 00000000 00:00 0 \nRss: 100 kB\n');
    expect(classify(lone[0]!, undefined)).toBe('anon');
    const unaligned = parseSmaps(
      '7f36e4001000-7f36e5ef4000 rw-p 00000000 00:00 0 \nRss: 100 kB\n7f36e5ef4000-7f36e8001000 ---p 00000000 00:00 0 \nRss: 0 kB\n',
    );
    expect(classify(unaligned[0]!, unaligned[1])).toBe('anon');
    const gap = parseSmaps('7f258c000000-7f2594000000 rw-p 00000000 00:00 0 \nRss: 100 kB\n7f2594001000-7f280c000000 ---p 00000000 00:00 0 \nRss: 0 kB\n');
    expect(classify(gap[0]!, gap[1])).toBe('anon');
  });

  it('prints the shares and their growth in MB', () => {
    const a = attribute(mappings);
    expect(formatAttribution(a)).toBe('wasm 33 (1 memories), v8 1, arenas 67 (3 heaps), brk 7, anon 9, jit 2, files 23, other 0');
    const later = { ...a, kb: { ...a.kb, wasm: a.kb.wasm + 10240, arenas: a.kb.arenas - 512 } };
    expect(formatGrowth(a, later)).toBe('wasm +10.0, v8 +0.0, arenas -0.5, brk +0.0, anon +0.0, jit +0.0, files +0.0, other +0.0');
  });
});
