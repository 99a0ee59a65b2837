#!/usr/bin/env python3
"""Random markets with one of the issue's errors at a time, the suite's kinds drawn at random.

Usage: infra/scenarios/single_error_markets.py OUT_DIR [SEED [COUNT]]   (default seed 5, 32 markets)
Needs the release binary (cargo build --release -p standalone).

Each market: one item with exponential, logistic or uniform willingness to pay; flat,
rising, late-surge or late-ramp arrivals; capacity 100, 200 or 400; demand at the middle
of the willingness to pay 0.6 to 1.6 times the capacity (as random_markets.py). Then
exactly one of the suite's four errors, in turn: the default 25 % below the best fixed
price, or 30 % above it (`expectedSales` right: the true demand at the default); or the
default at the best fixed price and the true demand at it 40 % above, or 40 % below,
`expectedSales` (at most 1). Then run, e.g.:
  for f in OUT_DIR/*.json; do target/release/standalone simulate market --quiet \\
    --scenario $f --json --models default,pace,fixed --past-instances 0; done
(docs/pricing.md, "One error at a time").
"""
import json, os, random
from markets import SHAPES, best_fixed, command_line, pbuy, random_buyers

# (name, default off the best fixed price, true demand over the belief)
ERRORS = [('default-25-below', -0.25, 1.0), ('default-30-above', 0.30, 1.0),
          ('demand-40-above', 0.0, 1.4), ('demand-40-below', 0.0, 0.6)]

OUT, N = command_line(__doc__, 5, 32)
for i in range(N):
    kind, w, center = random_buyers()
    cap = random.choice([100, 200, 400])
    shape = random.choice(list(SHAPES))
    ratio = random.choice([0.6, 0.9, 1.2, 1.6])
    arrivals = round(cap * ratio / pbuy(w, center), 1)
    error, off, over = ERRORS[i % len(ERRORS)]
    sc = {'name': f'e{i}-{kind}-{shape}-cap{cap}-x{ratio}-{error}', 'days': 30, 'slotsPerDay': 24,
          'capacity': cap, 'expectedSales': 1,
          'items': [{'itemId': 'ga',
                     'priceSettings': {'min': round(center * 0.4, 2), 'max': round(center * 2.5, 2),
                                       'default': center},
                     'arrivals': arrivals, 'shape': SHAPES[shape], 'willingnessToPay': w}],
          'pastInstances': 3, 'runs': 200, 'seed': 1}
    d = round(best_fixed(OUT, sc)['ga'] * (1 + off), 2)
    truth = arrivals * pbuy(w, d) / cap
    sc['items'][0]['priceSettings']['default'] = d
    sc['expectedSales'] = round(min(1, truth / over), 4)
    with open(os.path.join(OUT, f'{i:02d}.json'), 'w') as f:
        json.dump(sc, f)
