//! The yardsticks of a market (PRICING.md, "The yardstick"), computed from the true demand:
//!
//! - [`optimal_revenue`]: the continuous-time optimal dynamic policy (Gallego and van Ryzin
//!   1994). V(t, x) is the expected revenue with time t left and x units left; with the
//!   marginal value of a unit `delta = V(t, x) - V(t, x - 1)`,
//!   `-dV/dt = sum_i lambda_i(t) * max_{p in [min_i, max_i]} P_i(buy at p) * (p - delta)`.
//!   Each item's price is optimised given delta alone (closed form for exponential and
//!   uniform willingness to pay, golden section for logistic: [`Wtp::best_price`]); that
//!   maximum is tabulated once per item on a fine grid of delta. Time is discretised into
//!   pieces of equal expected arrivals (so a late surge gets fine steps where the buyers
//!   are), integrated by Heun's method (second order); see [`DP_ARRIVALS_PER_PIECE`] for the
//!   step, its measured convergence and timings. Prices cannot refuse a buyer (as in the
//!   market).
//! - [`fluid_bound`]: the deterministic upper bound. Sales of item i at price p(t) run at
//!   `lambda_i(t) * P_i(p(t))`; maximise revenue subject to total sales <= capacity, prices
//!   free to vary in time, selling less than demand allowed. Its Lagrangian dual is
//!   `min_{mu >= 0} mu * C + sum_i Lambda_i * max(0, max_p P_i(p) * (p - mu))`: for a given
//!   mu each item's best price does not depend on t (lambda_i(t) only scales the term), and
//!   revenue is concave in the demand rate for the three distributions, so there is no
//!   duality gap and constant prices per item are optimal in the fluid problem: the
//!   time-varying bound equals the standard one with one price per item. It bounds every
//!   policy, the optimal one included.
//! - [`best_fixed`]: one price per item, searched (coordinate-wise: a grid, then golden
//!   section, starting from the best of a coarse grid for two items, the defaults and the
//!   fluid prices), rounded to cents. A fixed-price policy's expected revenue is computed
//!   EXACTLY, not by Monte Carlo: attempts to buy item i (buyers willing to pay p_i) form a
//!   Poisson process of mean `A_i(t) = Lambda_i * P_i(p_i) * S_i(t)`, and a unit goes to an
//!   attempt while fewer than C attempts came before, so the expected units sold by t are
//!   `E[min(N, C)]` with `N ~ Poisson(A(t))`, `A = sum_i A_i` (the regularised incomplete
//!   gamma function); [`fixed_revenue`] splits them among the items piece by piece of time
//!   (exact when the items share one shape).

use crate::scenario::{ItemMarket, Scenario, Shape, Wtp, golden_max};

/// Expected arrivals per DP piece. Heun's method needs well under 2 for stability; at 0.5
/// (with at least [`DP_MIN_PIECES`]) the optimum is within 0.0003 % of that on 8 times as
/// many pieces in infra/scenarios and the flag form's defaults. Measured in release
/// (`dp_timing_and_convergence`, 2 cores): capacity 200 with 400 to 920 buyers, 2,000
/// pieces: 3.5 to 11 ms; capacity 1,000 with 13,445 buyers, 26,891 pieces: 0.28 s.
pub const DP_ARRIVALS_PER_PIECE: f64 = 0.5;
/// Fewest DP pieces (short or thin markets still get a fine time grid).
pub const DP_MIN_PIECES: usize = 2_000;
/// Points of the delta grid of each item's optimal gain.
const GAIN_POINTS: usize = 4_096;
/// Pieces of time when a fixed policy's revenue is split among items of different shapes
/// (the final evaluation; the search uses fewer).
const FIXED_PIECES: usize = 2_048;
const FIXED_SEARCH_PIECES: usize = 256;

#[derive(Debug, Clone, PartialEq)]
pub struct References {
    /// Expected revenue of the optimal dynamic policy.
    pub optimal: f64,
    pub fluid_bound: f64,
    /// Best fixed price per item (in the scenario's item order), in cents.
    pub best_fixed_prices: Vec<f64>,
    pub best_fixed: f64,
    /// Time pieces of the DP.
    pub dp_pieces: usize,
}

/// All references of `s`.
pub fn references(s: &Scenario) -> References {
    let pieces = dp_pieces(s);
    let (fluid_bound, mu) = fluid_bound(s);
    let (best_fixed_prices, best_fixed) = best_fixed(s, mu);
    References {
        // The fluid bound is a true upper bound of the optimum; the DP, on its pieces of
        // time and an interpolated gain, can come out a hair above it where buyers'
        // willingness to pay is nearly one value (an outside review: 6,433.50 against
        // 6,433.39, buyers all paying 64.32 to 64.335): above it, only the DP's error.
        optimal: optimal_revenue(s, pieces).min(fluid_bound),
        fluid_bound,
        best_fixed_prices,
        best_fixed,
        dp_pieces: pieces,
    }
}

/// The DP's time pieces for `s`.
pub fn dp_pieces(s: &Scenario) -> usize {
    ((s.total_arrivals() / DP_ARRIVALS_PER_PIECE).ceil() as usize).max(DP_MIN_PIECES)
}

/// The units the DP tracks: the capacity, or fewer when the buyers cannot take them all.
/// The buyers are Poisson of mean `arrivals`: more than `arrivals + 10 sd + 20` come with
/// a probability under 1e-23, so units beyond that never sell and the optimum is the
/// same (a product of capacity 2^53 - 1 made `simulate log` ask for 72 PB and abort).
pub fn dp_units(capacity: u64, arrivals: f64) -> u64 {
    let most = (arrivals.max(0.0) + 10.0 * arrivals.max(0.0).sqrt() + 20.0).ceil();
    capacity.min(most as u64)
}

/// Most steps (units tracked x time pieces x items) of the optimum's DP: about 10 ns each
/// in a release build, so at most about 40 s of one core.
pub const MAX_DP_STEPS: f64 = 4.0e9;

/// Most numbers of the DP's time grid (time pieces x items, 8 bytes each: 400 MB).
pub const MAX_GRID_CELLS: f64 = 5.0e7;

/// Most shape pieces summed into the market's shape (every item's points x items).
pub const MAX_SHAPE_CELLS: f64 = 1.0e8;

/// Most price evaluations x time pieces of the best fixed prices' search (about 0.3 us
/// each in a release build: at most about 30 s). The search moves one item's price at a
/// time, some 100 prices a move, for up to 30 rounds over the items; a piece is one when
/// the items share a shape, else [`FIXED_SEARCH_PIECES`].
pub const MAX_SEARCH_STEPS: f64 = 1.0e8;

/// Why the references of a scenario are too large to compute: the field to name and
/// what is over which bound.
#[derive(Debug, Clone, PartialEq)]
pub struct TooLarge {
    /// The scenario field that lowers it (`capacity` or `items`).
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Refuses a scenario whose references would take longer than about a minute of one core
/// or more than about 400 MB to compute: the optimum's DP counted in units, time pieces
/// and items (an outside probe: 500 items of 4,000 buyers each asked for 16 GB and
/// aborted), the shapes' sum, and the best fixed prices' search.
pub fn check_size(s: &Scenario) -> Result<(), TooLarge> {
    let buyers = s.total_arrivals();
    let items = s.items.len().max(1) as f64;
    let pieces = dp_pieces(s) as f64;
    let units = dp_units(s.capacity, buyers);
    let cells = pieces * items;
    if cells > MAX_GRID_CELLS {
        return Err(TooLarge {
            field: "items",
            message: format!(
                "with {buyers:.0} buyers expected over {items} items, the optimal policy's DP would hold {cells:.2e} numbers (2 time pieces per buyer, at least {DP_MIN_PIECES}, x items); at most {MAX_GRID_CELLS:.0e} (400 MB): lower the items or the arrivals"
            ),
        });
    }
    let steps = units as f64 * cells;
    if steps > MAX_DP_STEPS {
        return Err(TooLarge {
            field: "capacity",
            message: format!(
                "with {buyers:.0} buyers expected over {items} items, the optimal policy's DP would take {steps:.2e} steps ({units} units x 2 time pieces per buyer x items); at most {MAX_DP_STEPS:.0e} (about 40 s): lower the capacity, the items or the arrivals"
            ),
        });
    }
    let points: usize = s.items.iter().map(|i| i.shape.breakpoints().count()).sum();
    let shape_cells = points as f64 * items;
    if shape_cells > MAX_SHAPE_CELLS {
        return Err(TooLarge {
            field: "items",
            message: format!(
                "the items' shapes have {points} points together, summed for each of {items} items: {shape_cells:.2e}; at most {MAX_SHAPE_CELLS:.0e}: lower the items or their shapes' points"
            ),
        });
    }
    let search_pieces = if same_shapes(s) {
        1.0
    } else {
        FIXED_SEARCH_PIECES as f64
    };
    let search = 30.0 * items * (100.0 + items) * search_pieces;
    if search > MAX_SEARCH_STEPS {
        return Err(TooLarge {
            field: "items",
            message: format!(
                "the best fixed prices' search over {items} items would take {search:.2e} steps (30 rounds x items x (100 + items) x {search_pieces} time pieces); at most {MAX_SEARCH_STEPS:.0e} (about 30 s): lower the items, or give them one shape"
            ),
        });
    }
    Ok(())
}

/// Time cut into pieces of equal expected arrivals (all items together): `arrivals[k * n +
/// i]` is the expected buyers of item i in piece k.
pub struct Grid {
    items: usize,
    arrivals: Vec<f64>,
}

impl Grid {
    pub fn new(s: &Scenario, pieces: usize) -> Self {
        let items = s.items.len();
        let parts: Vec<(f64, &Shape)> = s.items.iter().map(|i| (i.arrivals, &i.shape)).collect();
        let Some((_, total)) = Shape::sum(&parts) else {
            return Grid {
                items,
                arrivals: Vec::new(),
            };
        };
        let pieces = pieces.max(1);
        let mut arrivals = Vec::with_capacity(pieces * items);
        let mut before: Vec<f64> = vec![0.0; items];
        for k in 1..=pieces {
            let cut = if k == pieces {
                1.0
            } else {
                total.inverse(k as f64 / pieces as f64)
            };
            for (item, prev) in s.items.iter().zip(before.iter_mut()) {
                let now = item.shape.cumulative(cut);
                arrivals.push(item.arrivals * (now - *prev).max(0.0));
                *prev = now;
            }
        }
        Grid { items, arrivals }
    }

    fn pieces(&self) -> impl DoubleEndedIterator<Item = &[f64]> {
        self.arrivals.chunks_exact(self.items.max(1))
    }
}

/// `max_{p in [min, max]} P(buy at p) * (p - delta)` of an item on a grid of delta,
/// interpolated linearly (the function is convex in delta, so the error is below
/// `step^2 / 8 * max P'` of the grid step).
struct GainTable {
    lo: f64,
    step: f64,
    values: Vec<f64>,
}

impl GainTable {
    fn new(item: &ItemMarket, hi: f64) -> Self {
        let lo = 0.0;
        let step = (hi - lo).max(1e-9) / (GAIN_POINTS - 1) as f64;
        let values = (0..GAIN_POINTS)
            .map(|j| {
                let delta = lo + step * j as f64;
                best_gain(item, delta)
            })
            .collect();
        GainTable { lo, step, values }
    }

    #[inline]
    fn at(&self, delta: f64) -> f64 {
        let x = (delta - self.lo) / self.step;
        // Beyond the ends the best price sits at a bound and the gain is linear: extend.
        let j = (x.max(0.0) as usize).min(self.values.len() - 2);
        let f = x - j as f64;
        self.values[j] + (self.values[j + 1] - self.values[j]) * f
    }
}

fn best_gain(item: &ItemMarket, delta: f64) -> f64 {
    let p = item.wtp.best_price(delta, item.min, item.max);
    item.wtp.gain(p, delta)
}

/// The highest price of any item: the marginal value of a unit never exceeds it.
fn top_price(s: &Scenario) -> f64 {
    s.items.iter().map(|i| i.max).fold(0.0, f64::max)
}

/// The optimal policy's expected revenue, on `pieces` pieces of time.
pub fn optimal_revenue(s: &Scenario, pieces: usize) -> f64 {
    let grid = Grid::new(s, pieces);
    // The marginal value of a unit never exceeds the value of a last unit at any time,
    // max over t of V(t, 1) (V is concave in the units left), nor the highest price: the
    // table spans that, computed first with exact gains. Not V(0, 1) alone: where buyers
    // who cannot be priced away (an item at a low max) come before the valuable ones, a
    // last unit is worth more later than at the start, and a table cut at V(0, 1)
    // extended the gain in a straight line beyond it, which undervalued it (an outside
    // probe's two-item market: an optimum of 13,062 under the best fixed price's 14,820).
    // That first pass reads tables over every delta up to the top price: the gain is
    // convex, so their chords lie above it and the last unit comes out no lower than its
    // worth (the table only has to reach it). Exact gains there cost a price search per
    // item and piece: minutes for 50 items of 4,000 buyers each (an outside probe).
    let top = top_price(s);
    let wide: Vec<GainTable> = s.items.iter().map(|i| GainTable::new(i, top)).collect();
    let (_, last_unit) = dp(&grid, 1, |i, delta| wide[i].at(delta));
    let hi = top.min(last_unit * (1.0 + 1e-6) + 1e-9);
    let tables: Vec<GainTable> = s.items.iter().map(|i| GainTable::new(i, hi)).collect();
    dp(&grid, s.capacity, |i, delta| tables[i].at(delta)).0
}

/// The expected revenue of holding `prices` (one per item) throughout, by the same DP as
/// the optimum (to check [`fixed_revenue`] against it).
pub fn fixed_revenue_dp(s: &Scenario, pieces: usize, prices: &[f64]) -> f64 {
    let items: Vec<(Wtp, f64)> = s
        .items
        .iter()
        .zip(prices)
        .map(|(i, p)| (i.wtp, *p))
        .collect();
    dp(&Grid::new(s, pieces), s.capacity, |i, delta| {
        items[i].0.gain(items[i].1, delta)
    })
    .0
}

/// V(0, capacity) of `-dV/dt = sum_i lambda_i gain_i(V(x) - V(x - 1))`, V(T, x) = 0,
/// backwards over the grid's pieces by Heun's method; and the largest V(t, 1) over the
/// pieces' ends (the most a last unit is worth at any time).
fn dp(grid: &Grid, capacity: u64, gain: impl Fn(usize, f64) -> f64) -> (f64, f64) {
    let arrivals: f64 = grid.arrivals.iter().sum();
    let c = usize::try_from(dp_units(capacity, arrivals)).unwrap_or(usize::MAX);
    let mut v = vec![0.0f64; c + 1];
    let mut slope = vec![0.0f64; c + 1];
    let mut trial = vec![0.0f64; c + 1];
    let mut last_unit = 0.0f64;
    let rate = |v: &[f64], x: usize, a: &[f64]| -> f64 {
        let delta = v[x] - v[x - 1];
        a.iter()
            .enumerate()
            .map(|(i, a)| if *a > 0.0 { a * gain(i, delta) } else { 0.0 })
            .sum()
    };
    for a in grid.pieces().rev() {
        for x in 1..=c {
            slope[x] = rate(&v, x, a);
            trial[x] = v[x] + slope[x];
        }
        for x in 1..=c {
            v[x] += 0.5 * (slope[x] + rate(&trial, x, a));
        }
        if let Some(&one) = v.get(1) {
            last_unit = last_unit.max(one);
        }
    }
    (v[c], last_unit)
}

/// The fluid bound and its multiplier mu (the marginal value of capacity).
pub fn fluid_bound(s: &Scenario) -> (f64, f64) {
    let dual = |mu: f64| {
        mu * s.capacity as f64
            + s.items
                .iter()
                .map(|i| i.arrivals * best_gain(i, mu).max(0.0))
                .sum::<f64>()
    };
    // The dual is convex in mu; for mu above every price it only grows.
    let mu = golden_max(|mu| -dual(mu), 0.0, top_price(s), 1e-12);
    (dual(mu), mu)
}

/// Expected units sold by a time when `mean` attempts to buy were expected, with
/// `capacity` units: E[min(N, C)], N ~ Poisson(mean).
pub fn expected_sales(mean: f64, capacity: u64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    let c = capacity as f64;
    // E[min(N, C)] = A * P(N <= C - 1) + C * P(N >= C + 1).
    let (_, below) = gamma_pq(c, mean);
    let (above, _) = gamma_pq(c + 1.0, mean);
    mean * below + c * above
}

/// The exact expected revenue of holding `prices` (one per item) throughout; see the
/// module notes. `pieces`: time pieces for items of different shapes.
pub fn fixed_revenue(s: &Scenario, prices: &[f64], pieces: usize) -> f64 {
    let grid = Grid::new(s, if same_shapes(s) { 1 } else { pieces });
    fixed_revenue_on(s, prices, &grid)
}

fn fixed_revenue_on(s: &Scenario, prices: &[f64], grid: &Grid) -> f64 {
    let q = buy_probabilities(s, prices);
    revenue_of_attempts(
        grid.pieces().map(|a| piece_attempts(a, &q, prices)),
        s.capacity,
    )
}

/// Each item's probability that a buyer buys at its price in `prices`.
fn buy_probabilities(s: &Scenario, prices: &[f64]) -> Vec<f64> {
    s.items
        .iter()
        .zip(prices)
        .map(|(i, p)| i.wtp.buy_probability(*p))
        .collect()
}

/// A piece's expected attempts to buy and their value: `a` its expected buyers per item,
/// `q` their buying probabilities at `prices`.
fn piece_attempts(a: &[f64], q: &[f64], prices: &[f64]) -> (f64, f64) {
    a.iter()
        .zip(q)
        .zip(prices)
        .fold((0.0, 0.0), |(n, v), ((a, q), p)| (n + a * q, v + a * q * p))
}

/// The expected revenue of pieces of time in order, each given by its expected attempts
/// to buy and their value at the prices (a unit goes to an attempt while units are left).
fn revenue_of_attempts(pieces: impl Iterator<Item = (f64, f64)>, capacity: u64) -> f64 {
    let (mut mean, mut sold_before, mut revenue) = (0.0, 0.0, 0.0);
    for (attempts, value) in pieces {
        if attempts <= 0.0 {
            continue;
        }
        mean += attempts;
        let sold = expected_sales(mean, capacity);
        revenue += (sold - sold_before) * value / attempts;
        sold_before = sold;
    }
    revenue
}

fn same_shapes(s: &Scenario) -> bool {
    s.items.windows(2).all(|w| w[0].shape == w[1].shape)
}

/// The best fixed prices (in cents, within the bounds) and their exact expected revenue.
/// `mu`: the fluid multiplier, whose prices start the search.
pub fn best_fixed(s: &Scenario, mu: f64) -> (Vec<f64>, f64) {
    let search = Grid::new(
        s,
        if same_shapes(s) {
            1
        } else {
            FIXED_SEARCH_PIECES
        },
    );
    let revenue = |p: &[f64]| fixed_revenue_on(s, p, &search);
    let mut starts: Vec<Vec<f64>> = vec![
        s.items.iter().map(|i| i.default).collect(),
        s.items
            .iter()
            .map(|i| i.wtp.best_price(mu, i.min, i.max))
            .collect(),
    ];
    if s.items.len() == 2 {
        const N: usize = 15;
        let at = |i: &ItemMarket, j: usize| i.min + (i.max - i.min) * j as f64 / (N - 1) as f64;
        let (a, b) = (&s.items[0], &s.items[1]);
        let best = (0..N * N)
            .map(|k| vec![at(a, k / N), at(b, k % N)])
            .max_by(|x, y| revenue(x).total_cmp(&revenue(y)));
        starts.extend(best);
    }
    let mut best = starts
        .into_iter()
        .max_by(|x, y| revenue(x).total_cmp(&revenue(y)))
        .unwrap_or_default();
    let mut value = revenue(&best);
    for _round in 0..30 {
        let before = value;
        for i in 0..best.len() {
            let item = &s.items[i];
            let (lo, hi) = (item.min, item.max);
            // The revenue as item i's price moves, the others' held: their attempts and
            // value per piece are summed once, so a point of the line costs a pass over
            // the pieces, not over the pieces and items (an outside probe: 400 items took
            // minutes).
            // Item i counted as buying nothing: the others alone.
            let mut q = buy_probabilities(s, &best);
            q[i] = 0.0;
            let others: Vec<(f64, f64, f64)> = search
                .pieces()
                .map(|a| {
                    let (n, v) = piece_attempts(a, &q, &best);
                    (n, v, a[i])
                })
                .collect();
            let line = |p: f64| {
                let q = item.wtp.buy_probability(p);
                revenue_of_attempts(
                    others.iter().map(|(n, v, a)| (n + a * q, v + a * q * p)),
                    s.capacity,
                )
            };
            const POINTS: usize = 48;
            let grid_point = |j: usize| lo + (hi - lo) * j as f64 / (POINTS - 1) as f64;
            let j = (0..POINTS)
                .map(|j| (j, line(grid_point(j))))
                .max_by(|x, y| x.1.total_cmp(&y.1))
                .map_or(0, |(j, _)| j);
            let p = golden_max(
                line,
                grid_point(j.saturating_sub(1)),
                grid_point((j + 1).min(POINTS - 1)),
                1e-9,
            );
            let candidate = line(p);
            if candidate > value {
                best[i] = p;
                value = candidate;
            }
        }
        if value - before <= 1e-10 * value.abs() {
            break;
        }
    }
    // An item nobody comes to buy earns the same at any price: its default is shown, not
    // whichever price the search ended on (an outside probe read one as advice).
    for (price, item) in best.iter_mut().zip(&s.items) {
        if item.arrivals <= 0.0 {
            *price = item.default;
        }
    }
    let cents = round_to_cents(s, &best, &revenue);
    let exact = fixed_revenue(s, &cents, FIXED_PIECES);
    (cents, exact)
}

/// The best of the cent prices around `prices` (all floor/ceil combinations for up to 6
/// items, the nearest cents beyond), within the bounds.
fn round_to_cents(s: &Scenario, prices: &[f64], revenue: &impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let options: Vec<[f64; 2]> = s
        .items
        .iter()
        .zip(prices)
        .map(|(i, p)| {
            let clamp = |c: f64| (c / 100.0).clamp(i.min, i.max);
            [clamp((p * 100.0).floor()), clamp((p * 100.0).ceil())]
        })
        .collect();
    if options.len() > 6 {
        return prices.iter().map(|p| (p * 100.0).round() / 100.0).collect();
    }
    (0..1usize << options.len())
        .map(|mask| {
            options
                .iter()
                .enumerate()
                .map(|(i, o)| o[(mask >> i) & 1])
                .collect::<Vec<f64>>()
        })
        .max_by(|x, y| revenue(x).total_cmp(&revenue(y)))
        .unwrap_or_else(|| prices.to_vec())
}

// ---------------------------------------------------------------------------------------
// Special functions

/// ln Gamma(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error about 1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + G + 0.5;
    let sum = C
        .iter()
        .enumerate()
        .skip(1)
        .fold(C[0], |acc, (i, c)| acc + c / (x + i as f64));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The regularised incomplete gamma functions (P(a, x), Q(a, x)), a > 0: by the series
/// below a + 1, by the continued fraction above (Numerical Recipes, 6.2). For whole a,
/// Q(a, x) = P(Poisson(x) <= a - 1).
pub fn gamma_pq(a: f64, x: f64) -> (f64, f64) {
    const EPS: f64 = 1e-15;
    const TINY: f64 = 1e-300;
    const MAX_ITER: usize = 100_000;
    if x <= 0.0 {
        return (0.0, 1.0);
    }
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut ap, mut term) = (a, 1.0 / a);
        let mut sum = term;
        for _ in 0..MAX_ITER {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * EPS {
                break;
            }
        }
        let p = (sum * front).min(1.0);
        (p, 1.0 - p)
    } else {
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..MAX_ITER {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < EPS {
                break;
            }
        }
        let q = (front * h).min(1.0);
        (1.0 - q, q)
    }
}
