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
from markets import SHAPES, command_line, pbuy, random_buyers, random_errors
OUT,N=command_line(__doc__,42,30)
for i in range(N):
    kind,w,center=random_buyers()
    cap=random.choice([100,200,400])
    shape=random.choice(list(SHAPES))
    ratio=random.choice([0.6,0.9,1.2,1.6])  # demand at ~center relative to capacity
    arrivals=round(cap*ratio/pbuy(w,center)*1.0,1)
    sc={'name':f'r{i}-{kind}-{shape}-cap{cap}-x{ratio}','days':30,'slotsPerDay':24,'capacity':cap,'expectedSales':1,
        'items':[{'itemId':'ga','priceSettings':{'min':round(center*0.4,2),'max':round(center*2.5,2),'default':center},
                  'arrivals':arrivals,'shape':SHAPES[shape],'willingnessToPay':w}],'pastInstances':3,'runs':200,'seed':1}
    random_errors(OUT,sc)
    json.dump(sc,open(os.path.join(OUT,f'{i:02d}.json'),'w'))
