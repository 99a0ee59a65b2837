#!/usr/bin/env python3
"""Random one-item markets, mostly with an on-sale rush or two peaks.

Usage: infra/scenarios/rush_markets.py OUT_DIR [SEED [COUNT]]   (default seed 7, 30 markets)
Needs the release binary (cargo build --release -p standalone).

Like random_markets.py (its buyer families, capacities, demand ratios and the errors of the
default and of expectedSales), with 7, 30 or 60 days (60 at 4 prices a day) and the
shapes: `early` and `early2` (a third of the buyers in the first tenth, or a quarter in
the first twentieth), `bimodal` and `bimodal2` (an on-sale and a last-minute peak), `flat` and
`late`. docs/pricing.md ("An on-sale rush against a hot market") records what it showed.
"""
import json, os, random, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from markets import best_fixed, command_line, pbuy
SHAPES = {
 'early': [[0, 5], [0.1, 5], [0.25, 1], [1, 0.6]],
 'early2': [[0, 8], [0.05, 8], [0.1, 1], [1, 1]],
 'bimodal': [[0, 0.4], [0.12, 3], [0.3, 0.4], [0.75, 0.4], [0.92, 3], [1, 1.5]],
 'bimodal2': [[0, 4], [0.08, 4], [0.15, 1], [0.85, 1], [0.9, 4], [1, 4]],
 'flat': [[0, 1], [1, 1]],
 'late': [[0, 1], [0.8667, 1], [0.8667, 6.5], [1, 6.5]],
}
OUT, N = command_line(__doc__, 7, 30)
for i in range(N):
    kind = random.choice(['exponential', 'logistic', 'uniform'])
    if kind == 'exponential': w = {'type': 'exponential', 'mean': random.choice([30, 40, 60])}; center = w['mean'] * 1.5
    elif kind == 'logistic': loc = random.choice([50, 70, 100]); w = {'type': 'logistic', 'location': loc, 'scale': loc * random.choice([0.12, 0.2])}; center = loc
    else: lo = random.choice([10, 20]); hi = lo + random.choice([60, 90]); w = {'type': 'uniform', 'low': lo, 'high': hi}; center = (lo + hi) / 2
    cap = random.choice([100, 200, 400])
    shape = random.choice(['early', 'early2', 'bimodal', 'bimodal2', 'early', 'bimodal', 'flat', 'late'])
    ratio = random.choice([0.6, 0.9, 1.2, 1.6])
    days = random.choice([7, 30, 60])
    arrivals = round(cap * ratio / pbuy(w, center), 1)
    sc = {'name': f'q{i}-{kind}-{shape}-cap{cap}-x{ratio}-{days}d', 'days': days, 'slotsPerDay': 24 if days < 60 else 4, 'capacity': cap, 'expectedSales': 1,
          'items': [{'itemId': 'ga', 'priceSettings': {'min': round(center * 0.4, 2), 'max': round(center * 2.5, 2), 'default': center},
                     'arrivals': arrivals, 'shape': SHAPES[shape], 'willingnessToPay': w}], 'pastInstances': 3, 'runs': 200, 'seed': 1}
    best = best_fixed(OUT, sc)['ga']
    derr = random.choice([-0.25, -0.1, 0, 0.1, 0.3])
    berr = random.choice([-0.4, 0, 0.4])
    d = round(best * (1 + derr), 2)
    truth = arrivals * pbuy(w, d) / cap
    sc['items'][0]['priceSettings']['default'] = d
    sc['expectedSales'] = round(min(1, truth * (1 + berr)), 4)
    sc['name'] += f'-d{derr:+}-b{berr:+}'
    json.dump(sc, open(os.path.join(OUT, f'{i:02d}.json'), 'w'))
