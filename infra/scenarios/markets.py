"""What the random market generators share (random_markets.py, random_two_item_markets.py,
single_error_markets.py, rush_markets.py): their command line, the arrival shapes, the
buyers of a one-item market and its errors, the probability of a purchase, and the probe
of the best fixed prices. Not a script."""
import json, math, os, random, subprocess, sys

SHAPES = {'flat': [[0, 1], [1, 1]], 'rising': [[0, 0.5], [1, 2]],
          'late': [[0, 1], [0.8667, 1], [0.8667, 6.5], [1, 6.5]],
          'ramp': [[0, 1], [0.7, 1], [1, 4]]}
BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'target', 'release', 'standalone')


def command_line(doc, seed, count):
    """OUT_DIR [SEED [COUNT]] from sys.argv (the usage `doc` without OUT_DIR); seeds
    `random` and creates OUT_DIR. Returns (OUT_DIR, COUNT)."""
    if len(sys.argv) < 2 or sys.argv[1].startswith('-'):
        sys.exit(doc)
    out = sys.argv[1]
    random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else seed)
    n = int(sys.argv[3]) if len(sys.argv) > 3 else count
    os.makedirs(out, exist_ok=True)
    return out, n


def pbuy(w, p):
    """The share of buyers with willingness to pay `w` who buy at price `p`."""
    if w['type'] == 'exponential': return math.exp(-p / w['mean'])
    if w['type'] == 'logistic': return 1 / (1 + math.exp((p - w['location']) / w['scale']))
    return min(1, max(0, (w['high'] - p) / (w['high'] - w['low'])))


def best_fixed(out, scenario):
    """The best fixed price of each item of `scenario`, as the simulator finds it."""
    probe = os.path.join(out, '.probe.json')
    json.dump(scenario, open(probe, 'w'))
    r = json.loads(subprocess.check_output([BIN, 'simulate', 'market', '--quiet', '--scenario', probe, '--json',
                                            '--models', 'fixed', '--runs', '20', '--past-instances', '0']))
    os.remove(probe)
    return r['bestFixed']['prices']


def random_buyers():
    """A one-item market's buyers: (family, willingness to pay, the middle of it)."""
    kind = random.choice(['exponential', 'logistic', 'uniform'])
    if kind == 'exponential':
        w = {'type': 'exponential', 'mean': random.choice([30, 40, 60])}
        return kind, w, w['mean'] * 1.5
    if kind == 'logistic':
        loc = random.choice([50, 70, 100])
        return kind, {'type': 'logistic', 'location': loc, 'scale': loc * random.choice([0.12, 0.2])}, loc
    lo = random.choice([10, 20])
    hi = lo + random.choice([60, 90])
    return kind, {'type': 'uniform', 'low': lo, 'high': hi}, (lo + hi) / 2


def random_errors(out, sc):
    """Sets one-item market `sc`'s default off its best fixed price by -25 to +30 % and its
    expectedSales off the true demand at that default by -40, 0 or +40 % (at most 1), and
    names them."""
    item = sc['items'][0]
    best = best_fixed(out, sc)[item['itemId']]
    derr = random.choice([-0.25, -0.1, 0, 0.1, 0.3])
    berr = random.choice([-0.4, 0, 0.4])
    d = round(best * (1 + derr), 2)
    truth = item['arrivals'] * pbuy(item['willingnessToPay'], d) / sc['capacity']
    item['priceSettings']['default'] = d
    sc['expectedSales'] = round(min(1, truth * (1 + berr)), 4)
    sc['name'] += f'-d{derr:+}-b{berr:+}'
