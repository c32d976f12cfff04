#!/usr/bin/env python3
# sweep.py DIR: medians per variant of the dsweep rows (files VARIANT-ROUND.log), table vs 0base
import sys, os, re, statistics as st, collections
d = sys.argv[1]
vals = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for f in sorted(os.listdir(d)):
    m = re.match(r'(.+)-(\d+)\.log$', f)
    if not m: continue
    v = m.group(1)
    for line in open(os.path.join(d, f)):
        if not line.startswith('| dsweep'): continue
        c = [x.strip() for x in line.strip().strip('|').split('|')]
        key = (c[0].replace(', graph of 20', '').replace('dsweep ', ''), c[1], c[2])
        if key not in order: order.append(key)
        vals[key][v].append(float(c[3]))
vs = sorted({v for k in vals for v in vals[k]})
short = lambda t: t.replace('bfloat16', 'bf16').replace('float16', 'f16').replace('float32', 'f32')
print('| row | x/tables | ' + ' | '.join(vs) + ' | ' + ' | '.join('%s/base' % v for v in vs if v != '0base') + ' |')
print('|---|---|' + '---:|' * (2 * len(vs) - 1))
worst = collections.defaultdict(list)
for k in order:
    med = {v: st.median(vals[k][v]) for v in vs if vals[k][v]}
    b = med.get('0base')
    cells = ['%.2f' % med[v] if v in med else '' for v in vs]
    rat = []
    for v in vs:
        if v == '0base': continue
        r = med[v] / b if (v in med and b) else float('nan')
        rat.append('%.3f' % r); worst[v].append((r, k))
    print('| %s | %s/%s | %s | %s |' % (k[0], short(k[1]), short(k[2]), ' | '.join(cells), ' | '.join(rat)))
print()
for v in worst:
    w = sorted(worst[v], reverse=True)
    print('%s: worst ratios %s' % (v, ', '.join('%.3f %s %s/%s' % (r, k[0], short(k[1]), short(k[2])) for r, k in w[:6])))
    print('   rows > 1.01: %d of %d; geo-mean %.3f' % (sum(1 for r, _ in w if r > 1.01), len(w), st.geometric_mean([r for r, _ in w])))
