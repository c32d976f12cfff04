#!/usr/bin/env python3
# grid2.py DIR: R2 grid: rows shape x dtypes; columns B=1..512 "new / base" (medians), B=1024/2048 "forced decode / default (= base)"
import sys, os, re, statistics as st, collections
d = sys.argv[1]
vals = collections.defaultdict(lambda: collections.defaultdict(list)); order = []; Bs = set()
for f in sorted(os.listdir(d)):
    m = re.match(r'(.+)-(\d+)\.log$', f)
    if not m: continue
    for line in open(os.path.join(d, f)):
        if not line.startswith('| dsweep'): continue
        c = [x.strip() for x in line.strip().strip('|').split('|')]
        name = c[0].replace(', graph of 20', '').replace('dsweep ', '')
        shp, B = name.rsplit(' B=', 1); B = int(B)
        key = (shp, c[1], c[2])
        if key not in order: order.append(key)
        Bs.add(B)
        vals[(key, B)][m.group(1)].append(float(c[3]))
short = lambda t: t.replace('bfloat16', 'bf16').replace('float16', 'f16').replace('float32', 'f32')
Bs = sorted(Bs)
print('| shape | x/tables | ' + ' | '.join('B=%d' % b for b in Bs) + ' |')
print('|---|---|' + '---|' * len(Bs))
worst = []; dec = []
for k in order:
    cells = []
    for b in Bs:
        v = vals.get((k, b))
        n, o = st.median(v['1new']), st.median(v['0base'])
        cell = '%.2f / %.2f' % (n, o)
        if v.get('2dec'):
            dd = st.median(v['2dec'])
            if abs(dd - n) / n > 0.03 or b > 512: cell += ' (%.2f)' % dd
            dec.append((dd / n, k, b))
        if b <= 512: worst.append((n / o, k, b))
        cells.append(cell)
    print('| %s | %s/%s | %s |' % (k[0], short(k[1]), short(k[2]), ' | '.join(cells)))
worst.sort(reverse=True)
print('\nB<=512 worst new/base: ' + ', '.join('%.3f %s %s/%s B=%d' % (r, k[0], short(k[1]), short(k[2]), b) for r, k, b in worst[:10]))
print('rows > 1.00: %d, > 1.02: %d of %d; geo-mean %.3f; best %.3f' % (sum(r > 1.0 for r, _, _ in worst), sum(r > 1.02 for r, _, _ in worst), len(worst), st.geometric_mean([r for r, _, _ in worst]), worst[-1][0]))
dec.sort()
print('forced decode / new, best: ' + ', '.join('%.3f %s %s/%s B=%d' % (r, k[0], short(k[1]), short(k[2]), b) for r, k, b in dec[:14]))
print('forced decode / new, worst: ' + ', '.join('%.3f %s %s/%s B=%d' % (r, k[0], short(k[1]), short(k[2]), b) for r, k, b in dec[-8:]))
