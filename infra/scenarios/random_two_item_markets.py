#!/usr/bin/env python3
"""Random markets of one product with two items sharing its capacity (a general and a
premium one), beyond the suite's `premium-two-items`.

Usage: infra/scenarios/random_two_item_markets.py OUT_DIR [SEED [COUNT]]   (default seed 5, 24)
Needs the release binary (cargo build --release -p standalone).

Each market: capacity 100, 200 or 400; demand at the middle of the items' willingness to
pay 0.6 to 1.6 times the capacity, of which the premium item takes 10, 25 or 50 %; each
item's buyers exponential, logistic or uniform, the premium item's 1.5 or 2.5 times as
rich, each with its own arrivals (flat, rising, late surge, late ramp). Both defaults are
the best fixed prices (found by the simulator) off by the same -25, -10, 0, +10 or +30 %,
and expectedSales the true demand at the defaults off by -40, 0 or +40 % (at most 1).
Then run, e.g.:
  for f in OUT_DIR/*.json; do target/release/standalone simulate market --quiet \
    --scenario $f --json --models default,pace,fixed --past-instances 3; done
(docs/pricing.md, "Products of several items with history").
"""
import json, os, random
from markets import SHAPES, best_fixed, command_line, pbuy
OUT,N=command_line(__doc__,5,24)
def wtp(scale):
    kind=random.choice(['exponential','logistic','uniform'])
    if kind=='exponential': w={'type':'exponential','mean':40*scale}; center=w['mean']*1.5
    elif kind=='logistic': loc=70*scale; w={'type':'logistic','location':loc,'scale':loc*random.choice([0.12,0.2])}; center=loc
    else: lo=15*scale; hi=lo+75*scale; w={'type':'uniform','low':lo,'high':hi}; center=(lo+hi)/2
    return kind,w,center
for i in range(N):
    cap=random.choice([100,200,400])
    ratio=random.choice([0.6,0.9,1.2,1.6])
    share=random.choice([0.1,0.25,0.5])  # premium's share of units at center
    items=[]; names=[]
    for iid,scale,sh in (('ga',1,1-share),('vip',random.choice([1.5,2.5]),share)):
        kind,w,center=wtp(scale)
        shape=random.choice(list(SHAPES))
        arr=round(cap*ratio*sh/pbuy(w,center),1)
        items.append({'itemId':iid,'priceSettings':{'min':round(center*0.4,2),'max':round(center*2.5,2),'default':center},'arrivals':arr,'shape':SHAPES[shape],'willingnessToPay':w})
        names.append(f'{iid}-{kind}-{shape}')
    sc={'name':f'm{i}-'+'-'.join(names)+f'-cap{cap}-x{ratio}-s{share}','days':30,'slotsPerDay':24,'capacity':cap,'expectedSales':1,'items':items,'pastInstances':3,'runs':200,'seed':1}
    best=best_fixed(OUT,sc)
    derr=random.choice([-0.25,-0.1,0,0.1,0.3]); berr=random.choice([-0.4,0,0.4])
    truth=0
    for it in items:
        d=round(best[it['itemId']]*(1+derr),2)
        it['priceSettings']['default']=d
        truth+=it['arrivals']*pbuy(it['willingnessToPay'],d)
    sc['expectedSales']=round(min(1,truth/cap*(1+berr)),4)
    sc['name']+=f'-d{derr:+}-b{berr:+}'
    json.dump(sc,open(os.path.join(OUT,f'{i:02d}.json'),'w'))
