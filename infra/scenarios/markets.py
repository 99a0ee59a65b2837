"""What the random market generators share (random_markets.py, random_two_item_markets.py):
their command line, the arrival shapes, the probability of a purchase, and the probe of
the best fixed prices. Not a script."""
import json, math, os, random, subprocess, sys

SHAPES = {'flat': [[0, 1], [1, 1]], 'rising': [[0, 0.5], [1, 2]],
          'late': [[0, 1], [0.8667, 1], [0.8667, 6.5], [1, 6.5]],
          'ramp': [[0, 1], [0.7, 1], [1, 4]]}
BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'target', 'release', 'standalone')


def command_line(doc, seed, count):
    """OUT_DIR [SEED [COUNT]] from sys.argv (the usage `doc` without OUT_DIR); seeds
    `random` and creates OUT_DIR. Returns (OUT_DIR, COUNT)."""
    if len(sys.argv) < 2:
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
