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
from markets import command_line, pbuy, random_buyers, random_errors
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
    kind, w, center = random_buyers()
    cap = random.choice([100, 200, 400])
    shape = random.choice(['early', 'early2', 'bimodal', 'bimodal2', 'early', 'bimodal', 'flat', 'late'])
    ratio = random.choice([0.6, 0.9, 1.2, 1.6])
    days = random.choice([7, 30, 60])
    arrivals = round(cap * ratio / pbuy(w, center), 1)
    sc = {'name': f'q{i}-{kind}-{shape}-cap{cap}-x{ratio}-{days}d', 'days': days, 'slotsPerDay': 24 if days < 60 else 4, 'capacity': cap, 'expectedSales': 1,
          'items': [{'itemId': 'ga', 'priceSettings': {'min': round(center * 0.4, 2), 'max': round(center * 2.5, 2), 'default': center},
                     'arrivals': arrivals, 'shape': SHAPES[shape], 'willingnessToPay': w}], 'pastInstances': 3, 'runs': 200, 'seed': 1}
    random_errors(OUT, sc)
    json.dump(sc, open(os.path.join(OUT, f'{i:02d}.json'), 'w'))
