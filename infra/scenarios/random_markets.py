#!/usr/bin/env python3
"""Random markets beyond the suite, in the families of the issue and PRICING.md.

Usage: infra/scenarios/random_markets.py OUT_DIR [SEED [COUNT]]   (default seed 42, 30 markets)
Needs the release binary (cargo build --release -p standalone).

Each market: one item with exponential, logistic or uniform willingness to pay; flat,
rising, late-surge or late-ramp arrivals; capacity 100, 200 or 400; demand at the middle
of the willingness to pay 0.6 to 1.6 times the capacity. Its default is the best fixed
price (found by the simulator) off by -25, -10, 0, +10 or +30 %, and expectedSales the
true demand at that default off by -40, 0 or +40 % (at most 1). Then run, e.g.:
  for f in OUT_DIR/*.json; do target/release/standalone simulate market --quiet \
    --scenario $f --json --models default,pace,fixed --past-instances 0; done
(docs/pricing.md, "Beyond the suite").
"""
import json, os, random
from markets import SHAPES, best_fixed, command_line, pbuy
OUT,N=command_line(__doc__,42,30)
for i in range(N):
    kind=random.choice(['exponential','logistic','uniform'])
    if kind=='exponential': w={'type':'exponential','mean':random.choice([30,40,60])}; center=w['mean']*1.5
    elif kind=='logistic': loc=random.choice([50,70,100]); w={'type':'logistic','location':loc,'scale':loc*random.choice([0.12,0.2])}; center=loc
    else: lo=random.choice([10,20]); hi=lo+random.choice([60,90]); w={'type':'uniform','low':lo,'high':hi}; center=(lo+hi)/2
    cap=random.choice([100,200,400])
    shape=random.choice(list(SHAPES))
    ratio=random.choice([0.6,0.9,1.2,1.6])  # demand at ~center relative to capacity
    arrivals=round(cap*ratio/pbuy(w,center)*1.0,1)
    sc={'name':f'r{i}-{kind}-{shape}-cap{cap}-x{ratio}','days':30,'slotsPerDay':24,'capacity':cap,'expectedSales':1,
        'items':[{'itemId':'ga','priceSettings':{'min':round(center*0.4,2),'max':round(center*2.5,2),'default':center},
                  'arrivals':arrivals,'shape':SHAPES[shape],'willingnessToPay':w}],'pastInstances':3,'runs':200,'seed':1}
    best=best_fixed(OUT,sc)['ga']
    derr=random.choice([-0.25,-0.1,0,0.1,0.3])
    berr=random.choice([-0.4,0,0.4])
    d=round(best*(1+derr),2)
    truth=arrivals*pbuy(w,d)/cap
    sc['items'][0]['priceSettings']['default']=d
    sc['expectedSales']=round(min(1,truth*(1+berr)),4)
    sc['name']+=f'-d{derr:+}-b{berr:+}'
    json.dump(sc,open(os.path.join(OUT,f'{i:02d}.json'),'w'))
