#!/usr/bin/env python3
"""Markets with capacity to spare and the default below the revenue-maximising price.

Usage: infra/scenarios/spare_capacity_markets.py OUT_DIR

Twenty one-item markets, capacity 200, 30 days: exponential willingness to pay (mean 40,
so the revenue-maximising and best fixed price is 40) with 250, 300 or 400 buyers (92 to
147 of them buy at 40: no price above 30 sells the capacity), the default 30 or 34 (25 and
15 % below 40), and `expectedSales` the true demand at the default (b0), 40 % above it
(bhi, at most 1) or 40 % below it (blo); one of them with the late surge's arrivals.
Their price response at the default is 0.75 or 0.85 (b * d), where the revenue model's
prior is 1.5: the model's known weakness with capacity to spare (docs/pricing.md,
"Capacity to spare and a default below the revenue-maximising price"). For contrast, one
logistic market whose capacity binds (location 70, scale 14, 300 buyers, default 45).
Then run, e.g.:
  for f in OUT_DIR/*.json; do target/release/standalone simulate market --quiet \\
    --scenario $f --json --models default,pace,fixed --past-instances 3; done
"""
import json, math, os, sys


def write(out, name, arrivals, default, expected, shape=((0, 1), (1, 1)),
          wtp=None, bounds=(15, 120)):
    scenario = {
        'name': name, 'days': 30, 'slotsPerDay': 24, 'capacity': 200,
        'expectedSales': expected,
        'items': [{'itemId': 'ga',
                   'priceSettings': {'min': bounds[0], 'max': bounds[1], 'default': default},
                   'arrivals': arrivals, 'shape': [list(p) for p in shape],
                   'willingnessToPay': wtp or {'type': 'exponential', 'mean': 40}}],
        'pastInstances': 3, 'runs': 200, 'seed': 1}
    with open(os.path.join(out, name + '.json'), 'w') as f:
        json.dump(scenario, f)


if len(sys.argv) != 2:
    sys.exit(__doc__)
OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
for arrivals in (250, 300, 400):
    for default in (30, 34):
        truth = arrivals * math.exp(-default / 40) / 200
        for error, tag in ((0, 'b0'), (0.4, 'bhi'), (-0.4, 'blo')):
            write(OUT, f'exp-a{arrivals}-d{default}-{tag}', arrivals, default,
                  round(min(1, truth * (1 + error)), 3))
write(OUT, 'exp-a300-d30-late-b0', 300, 30, round(300 * math.exp(-0.75) / 200, 3),
      shape=((0, 1), (0.8, 1.5), (1, 12)))
write(OUT, 'log-spare-d-low', 300, 45, 0.5,
      wtp={'type': 'logistic', 'location': 70, 'scale': 14}, bounds=(20, 150))
