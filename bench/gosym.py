#!/usr/bin/env python3
"""bench/gosym.py GOPCLNTAB [TOP] < `perf script -G -F comm,ip,sym,dso`

CPU share of a perf recording by process, by category and by function. Samples in the
stripped skopeo binary are named from its .gopclntab section (Go 1.18-1.20 layout; dump it
with `objcopy --dump-section .gopclntab=FILE /usr/bin/skopeo /dev/null`). Used by
bench/profile.sh.
"""
import bisect
import collections
import re
import struct
import sys


def go_functions(path):
    b = open(path, 'rb').read()
    magic, = struct.unpack_from('<I', b, 0)
    if magic not in (0xfffffff0, 0xfffffff1):
        sys.exit(f'gosym: {path}: not a Go 1.18-1.20 pclntab (magic {magic:#x})')
    nfunc, _nfiles, text, nametab, _cu, _filetab, _pctab, functab = struct.unpack_from('<8Q', b, 8)
    funcs = []
    for i in range(nfunc):
        entry, off = struct.unpack_from('<II', b, functab + 8 * i)
        _, nameoff = struct.unpack_from('<Ii', b, functab + off)
        s = nametab + nameoff
        funcs.append((text + entry, b[s:b.index(b'\0', s)].decode()))
    funcs.sort()
    return [a for a, _ in funcs], [n for _, n in funcs]


def category(proc, sym, dso):
    if 'kallsyms' in dso:
        return 'kernel (copies, pipes, sockets, page cache, scheduling)'
    if 'sha256' in sym or 'sha2::' in sym:
        return 'sha256'
    if proc == 'skopeo':
        if sym.startswith('crypto/aes') or 'gcm' in sym.lower():
            return 'TLS decryption (AES-GCM)'
        if sym.startswith('runtime.'):
            return 'Go runtime'
    return 'other'


def main():
    addrs, names = go_functions(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    line = re.compile(r'^\s*(\S.*?)\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)\s*$')
    total = 0
    by_proc, by_cat, by_sym = collections.Counter(), collections.Counter(), collections.Counter()
    for text in sys.stdin:
        m = line.match(text)
        if not m:
            continue
        comm, ip, sym, dso = m.groups()
        proc = 'skopeo' if comm == 'skopeo' else 'hostpull'   # tokio-rt-worker: hostpull
        if dso.endswith('/skopeo'):
            i = bisect.bisect_right(addrs, int(ip, 16)) - 1
            sym = names[i] if i >= 0 else sym
        if 'kallsyms' in dso:
            sym = '[k] ' + sym
        total += 1
        by_proc[proc] += 1
        by_cat[(proc, category(proc, sym, dso))] += 1
        by_sym[(proc, sym)] += 1
    if not total:
        sys.exit('gosym: no samples')
    print(f'{total} samples')
    for p, n in by_proc.most_common():
        print(f'{100 * n / total:5.1f}%  {p}')
        for (q, c), k in by_cat.most_common():
            if q == p:
                print(f'{100 * k / total:5.1f}%    {c}')
    print('top functions:')
    for (p, s), n in by_sym.most_common(top):
        print(f'{100 * n / total:5.1f}%  {p:8} {s}')


main()
