//! The market scenario (PRICING.md, "Market scenarios"): the file format, read with errors
//! that name the field (`items/0/willingnessToPay/mean: must be > 0`) and unknown fields
//! refused; the demand it describes (arrival shapes, willingness to pay).

use pricing_core::entry::PricingModel;
use pricing_core::ids::ItemId;
use pricing_core::money::Money;
pub use pricing_core::pricing::demand::golden_max;
use pricing_core::time::Timestamp;
use serde_json::{Map, Value};

pub const MILLIS_PER_DAY: i64 = 86_400_000;
/// Start of the first simulated instance (fixed, so runs are reproducible).
pub const MARKET_START: &str = "2026-01-01T00:00:00Z";
/// Item of the scenario built from flags.
pub const FLAG_ITEM: &str = "simulated-item";

pub const DEFAULT_SLOTS_PER_DAY: u64 = 24;
/// The shortest sales period a scenario may have, in days (about a quarter of an hour).
pub const MIN_DAYS: f64 = 0.01;
pub const DEFAULT_RUNS: u32 = 200;
pub const DEFAULT_SEED: u64 = 1;
/// Bounds that keep a mistyped file from running for hours (the API has tighter ones:
/// [`crate::caps`]).
pub const MAX_SLOTS: u64 = 1_000_000;
pub const MAX_RUNS: u32 = 1_000_000;
pub const MAX_PAST_INSTANCES: u32 = 1_000;
/// (The optimum's DP takes 2 pieces of time per expected buyer.)
pub const MAX_ARRIVALS: f64 = 1.0e6;
/// Expected buyers of all items together: a run draws them (24 bytes each) for one
/// instance at a time.
pub const MAX_TOTAL_ARRIVALS: f64 = 2.0e6;
pub const MAX_CAPACITY: u64 = 1_000_000;

/// The largest scenario a reader takes. [`Bounds::FILE`] for `standalone simulate`;
/// the API's are tighter ([`crate::caps::API`]) so that a request cannot occupy a server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub max_name_chars: usize,
    pub max_days: u64,
    pub max_slots_per_day: u64,
    /// days x slotsPerDay.
    pub max_slots: u64,
    pub max_capacity: u64,
    pub max_items: usize,
    /// Expected buyers of one item.
    pub max_arrivals: f64,
    /// Expected buyers of all items together.
    pub max_total_arrivals: f64,
    pub max_shape_points: usize,
    pub max_runs: u32,
    pub max_past_instances: u32,
    /// Largest `seed`.
    pub max_seed: u64,
    /// Largest magnitude of a price, a willingness-to-pay parameter and a shape weight.
    pub max_value: f64,
}

impl Bounds {
    /// A scenario file of `standalone simulate market`.
    pub const FILE: Bounds = Bounds {
        max_name_chars: usize::MAX,
        max_days: 100_000,
        max_slots_per_day: 1_440,
        max_slots: MAX_SLOTS,
        max_capacity: MAX_CAPACITY,
        max_items: usize::MAX,
        max_arrivals: MAX_ARRIVALS,
        max_total_arrivals: MAX_TOTAL_ARRIVALS,
        max_shape_points: usize::MAX,
        max_runs: MAX_RUNS,
        max_past_instances: MAX_PAST_INSTANCES,
        max_seed: u64::MAX,
        max_value: f64::INFINITY,
    };
}

/// A market: one product whose items share its capacity, each with its own buyers.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    /// Length of an instance's sales period (`days`), in milliseconds.
    pub period_ms: i64,
    /// Scheduled price calculations per instance (`days` x `slotsPerDay`).
    pub slots: u64,
    pub capacity: u64,
    pub expected_sales: f64,
    pub items: Vec<ItemMarket>,
    pub past_instances: u32,
    pub runs: u32,
    pub seed: u64,
    /// What a file does not say; `simulate log` fills it from the logged instance.
    pub context: Context,
}

/// The instance and product around a market.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    /// Start of the first instance's sales period; instance `j` starts `j` periods later.
    pub start: Timestamp,
    /// The scored instance's meta; `None`: the main date is the end of the sales period.
    pub meta: Option<Map<String, Value>>,
    /// Product properties besides capacity, expectedSales and pricingModel (rounding...).
    pub product: Map<String, Value>,
    /// The product's own model (`current` in `simulate log`).
    pub own_model: Option<PricingModel>,
}

impl Default for Context {
    fn default() -> Self {
        Context {
            start: Timestamp::parse(MARKET_START).unwrap_or_else(Timestamp::now),
            meta: None,
            product: Map::new(),
            own_model: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ItemMarket {
    pub item_id: ItemId,
    pub min: f64,
    pub max: f64,
    pub default: f64,
    /// Expected potential buyers over the whole period.
    pub arrivals: f64,
    pub shape: Shape,
    pub wtp: Wtp,
}

impl Scenario {
    pub fn days(&self) -> f64 {
        self.period_ms as f64 / MILLIS_PER_DAY as f64
    }

    pub fn slots_per_day(&self) -> f64 {
        self.slots as f64 / self.days()
    }

    /// Reads a scenario document; the error names the field.
    pub fn from_json(value: &Value) -> Result<Self, FieldError> {
        Self::from_json_within(value, &Bounds::FILE)
    }

    /// Reads a scenario document no larger than `b`; the error names the field.
    pub fn from_json_within(value: &Value, b: &Bounds) -> Result<Self, FieldError> {
        let root = Obj::new(value, "")?;
        root.only(&[
            "name",
            "days",
            "slotsPerDay",
            "capacity",
            "expectedSales",
            "items",
            "pastInstances",
            "runs",
            "seed",
        ])?;
        let name = root.req_str("name")?;
        if name.chars().count() > b.max_name_chars {
            return Err(root.error(
                "name",
                format!("must be at most {} characters", b.max_name_chars),
            ));
        }
        // A sale may last part of a day or a day and a half: `days` is a number. The
        // calculations are `days x slotsPerDay`, rounded, spread evenly over the period.
        let days = root.req_f64("days")?;
        if !(MIN_DAYS..=b.max_days as f64).contains(&days) {
            return Err(root.error("days", format!("must be from {MIN_DAYS} to {}", b.max_days)));
        }
        let slots_per_day = root
            .opt_u64("slotsPerDay", 1, b.max_slots_per_day)?
            .unwrap_or(DEFAULT_SLOTS_PER_DAY);
        let slots = (days * slots_per_day as f64).round().max(1.0);
        if slots > b.max_slots as f64 {
            return Err(root.error(
                "slotsPerDay",
                format!("days x slotsPerDay is {slots}; at most {}", b.max_slots),
            ));
        }
        let slots = slots as u64;
        let capacity = root.req_u64("capacity", 1, b.max_capacity)?;
        let expected_sales = root.req_f64("expectedSales")?;
        if !(0.0..=1.0).contains(&expected_sales) {
            return Err(root.error("expectedSales", "must be a fraction from 0 to 1"));
        }
        let list = root.req("items")?;
        let items = list
            .as_array()
            .ok_or_else(|| root.error("items", "must be an array").with_code("type"))?;
        if items.is_empty() {
            return Err(root.error("items", "must list at least one item"));
        }
        if items.len() > b.max_items {
            return Err(root.error(
                "items",
                format!("lists {} items; at most {}", items.len(), b.max_items),
            ));
        }
        let mut parsed: Vec<ItemMarket> = Vec::with_capacity(items.len());
        let mut arrivals = 0.0;
        for (i, item) in items.iter().enumerate() {
            let item = item_from_json(item, &format!("items/{i}"), b)?;
            if parsed.iter().any(|p| p.item_id == item.item_id) {
                return Err(FieldError::new(
                    &format!("items/{i}/itemId"),
                    format!("`{}` is listed twice", item.item_id),
                )
                .with_code("conflict"));
            }
            arrivals += item.arrivals;
            if arrivals > b.max_total_arrivals {
                return Err(FieldError::new(
                    &format!("items/{i}/arrivals"),
                    format!(
                        "the items' arrivals add up to {arrivals}; at most {} together",
                        b.max_total_arrivals
                    ),
                ));
            }
            parsed.push(item);
        }
        let scenario = Scenario {
            name,
            period_ms: (days * MILLIS_PER_DAY as f64).round() as i64,
            slots,
            capacity,
            expected_sales,
            items: parsed,
            past_instances: root
                .opt_u64("pastInstances", 0, u64::from(b.max_past_instances))?
                .map_or(0, |n| n as u32),
            runs: root
                .opt_u64("runs", 1, u64::from(b.max_runs))?
                .map_or(DEFAULT_RUNS, |n| n as u32),
            seed: root.opt_u64("seed", 0, b.max_seed)?.unwrap_or(DEFAULT_SEED),
            context: Context::default(),
        };
        crate::references::check_size(&scenario).map_err(|e| root.error(e.field, e.message))?;
        Ok(scenario)
    }

    /// Expected buyers of all items over the period.
    pub fn total_arrivals(&self) -> f64 {
        self.items.iter().map(|i| i.arrivals).sum()
    }
}

fn item_from_json(value: &Value, path: &str, b: &Bounds) -> Result<ItemMarket, FieldError> {
    let o = Obj::new(value, path)?;
    o.only(&[
        "itemId",
        "priceSettings",
        "arrivals",
        "shape",
        "willingnessToPay",
    ])?;
    let id = o.req_str("itemId")?;
    let item_id = ItemId::parse(id).map_err(|e| o.error("itemId", e.to_string()))?;
    let ps = Obj::new(o.req("priceSettings")?, &o.path_of("priceSettings"))?;
    ps.only(&["min", "max", "default"])?;
    let price = |key: &str| -> Result<f64, FieldError> {
        let v = ps.req_f64(key)?;
        if v < 0.0 {
            return Err(ps.error(key, "must not be negative"));
        }
        if v > b.max_value {
            return Err(ps.error(key, format!("must be at most {}", b.max_value)));
        }
        Money::from_f64(v).map_err(|e| ps.error(key, e.to_string()))?;
        Ok(v)
    };
    let (min, max, default) = (price("min")?, price("max")?, price("default")?);
    if max < min {
        return Err(ps.error("max", "must not be below min"));
    }
    if default < min || default > max {
        return Err(ps.error("default", "must lie within [min, max]"));
    }
    // As the flag form's --default-price: the models start from the default and move it
    // by factors, so at 0 every one of them earns nothing (an outside probe).
    if default <= 0.0 {
        return Err(ps.error(
            "default",
            "must be more than 0: the models price from it (at 0 every one earns nothing)",
        ));
    }
    let arrivals = o.req_f64("arrivals")?;
    if !(0.0..=b.max_arrivals).contains(&arrivals) {
        return Err(o.error("arrivals", format!("must be from 0 to {}", b.max_arrivals)));
    }
    let shape_path = o.path_of("shape");
    let points = o.req("shape")?.as_array().ok_or_else(|| {
        o.error("shape", "must be an array of [share, weight] points")
            .with_code("type")
    })?;
    if points.len() > b.max_shape_points {
        return Err(o.error(
            "shape",
            format!(
                "has {} points; at most {}",
                points.len(),
                b.max_shape_points
            ),
        ));
    }
    let points = points
        .iter()
        .enumerate()
        .map(|(j, p)| {
            let pair = p.as_array().filter(|a| a.len() == 2);
            let nums = pair.and_then(|a| Some([a[0].as_f64()?, a[1].as_f64()?]));
            nums.ok_or_else(|| {
                FieldError::new(
                    &format!("{shape_path}/{j}"),
                    "must be a [share, weight] pair",
                )
                .with_code("type")
            })
        })
        .collect::<Result<Vec<[f64; 2]>, FieldError>>()?;
    if let Some(j) = points.iter().position(|p| p[1].abs() > b.max_value) {
        return Err(FieldError::new(
            &format!("{shape_path}/{j}"),
            format!("a weight must be at most {}", b.max_value),
        ));
    }
    let shape = Shape::new(&points).map_err(|m| FieldError::new(&shape_path, m))?;
    let wtp = wtp_from_json(
        o.req("willingnessToPay")?,
        &o.path_of("willingnessToPay"),
        b,
    )?;
    Ok(ItemMarket {
        item_id,
        min,
        max,
        default,
        arrivals,
        shape,
        wtp,
    })
}

fn wtp_from_json(value: &Value, path: &str, b: &Bounds) -> Result<Wtp, FieldError> {
    let o = Obj::new(value, path)?;
    let number = |key: &str| -> Result<f64, FieldError> {
        let v = o.req_f64(key)?;
        if v.abs() > b.max_value {
            return Err(o.error(key, format!("must be from -{0} to {0}", b.max_value)));
        }
        Ok(v)
    };
    let positive = |key: &str| -> Result<f64, FieldError> {
        let v = number(key)?;
        if v > 0.0 {
            Ok(v)
        } else {
            Err(o.error(key, "must be > 0"))
        }
    };
    match o.req_str("type")?.as_str() {
        "exponential" => {
            o.only(&["type", "mean"])?;
            Ok(Wtp::Exponential {
                mean: positive("mean")?,
            })
        }
        "logistic" => {
            o.only(&["type", "location", "scale"])?;
            Ok(Wtp::Logistic {
                location: number("location")?,
                scale: positive("scale")?,
            })
        }
        "uniform" => {
            o.only(&["type", "low", "high"])?;
            let low = number("low")?;
            let high = number("high")?;
            if high <= low {
                return Err(o.error("high", "must be above low"));
            }
            Ok(Wtp::Uniform { low, high })
        }
        other => Err(o
            .error(
                "type",
                format!("unknown type `{other}` (exponential, logistic, uniform)"),
            )
            .with_code("unknownType")),
    }
}

/// A scenario error: the field (a path like `items/0/arrivals`), what kind of problem
/// (`code`: the API's codes, `required`, `type`, `unknownField`, `unknownType`,
/// `conflict`, else `range`) and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub path: String,
    pub code: &'static str,
    pub message: String,
}

impl FieldError {
    pub fn new(path: &str, message: impl Into<String>) -> Self {
        FieldError {
            path: path.to_owned(),
            code: "range",
            message: message.into(),
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    /// The field as a JSON Pointer into the scenario document (`/items/0/arrivals`).
    pub fn pointer(&self) -> String {
        if self.path.is_empty() {
            String::new()
        } else {
            format!("/{}", self.path)
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A JSON object being read at `path`.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn new(value: &'a Value, path: &str) -> Result<Self, FieldError> {
        let map = value.as_object().ok_or_else(|| {
            FieldError::new(
                path,
                if path.is_empty() {
                    "a scenario must be a JSON object"
                } else {
                    "must be an object"
                },
            )
            .with_code("type")
        })?;
        Ok(Obj {
            map,
            path: path.to_owned(),
        })
    }

    fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}/{key}", self.path)
        }
    }

    fn error(&self, key: &str, message: impl Into<String>) -> FieldError {
        FieldError::new(&self.path_of(key), message)
    }

    /// Refuses fields not in `allowed`.
    fn only(&self, allowed: &[&str]) -> Result<(), FieldError> {
        match self.map.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(self
                .error(
                    k,
                    format!("unknown field (expected one of: {})", allowed.join(", ")),
                )
                .with_code("unknownField")),
            None => Ok(()),
        }
    }

    fn req(&self, key: &str) -> Result<&'a Value, FieldError> {
        self.map
            .get(key)
            .ok_or_else(|| self.error(key, "is required").with_code("required"))
    }

    fn req_str(&self, key: &str) -> Result<String, FieldError> {
        match self.req(key)? {
            Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
            _ => Err(self
                .error(key, "must be a non-empty string")
                .with_code("type")),
        }
    }

    fn req_f64(&self, key: &str) -> Result<f64, FieldError> {
        self.req(key)?
            .as_f64()
            .filter(|v| v.is_finite())
            .ok_or_else(|| self.error(key, "must be a number").with_code("type"))
    }

    fn req_u64(&self, key: &str, min: u64, max: u64) -> Result<u64, FieldError> {
        let v = self.req(key)?;
        let out_of_range = || self.error(key, format!("must be from {min} to {max}"));
        match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(n),
            Some(_) => Err(out_of_range()),
            // A decimal that is a whole number (`3.0`) within u64 (2^64 would be saturated
            // to 2^64 - 1 by the cast); a whole number outside it (`-1`, `2^64 + 1`) is out
            // of the range, not of the type.
            None => match v.as_f64().filter(|f| f.is_finite() && f.fract() == 0.0) {
                Some(f)
                    if f >= min as f64 && f <= max as f64 && f < 18_446_744_073_709_551_616.0 =>
                {
                    Ok(f as u64)
                }
                Some(_) => Err(out_of_range()),
                None => Err(self.error(key, "must be a whole number").with_code("type")),
            },
        }
    }

    fn opt_u64(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>, FieldError> {
        if self.map.contains_key(key) {
            self.req_u64(key, min, max).map(Some)
        } else {
            Ok(None)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Arrival shapes

/// A piecewise-linear relative arrival intensity over the elapsed share of the period,
/// normalised to integrate to 1 (a density on [0, 1]). Equal shares make a jump.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// Pieces of positive length, in order, covering [0, 1].
    pieces: Vec<Piece>,
    /// The cumulative share of arrivals at the start of each piece.
    before: Vec<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Piece {
    fn area(&self) -> f64 {
        (self.y0 + self.y1) * 0.5 * (self.x1 - self.x0)
    }

    fn at(&self, x: f64) -> f64 {
        self.y0 + (self.y1 - self.y0) * (x - self.x0) / (self.x1 - self.x0)
    }

    /// Area from x0 to x.
    fn area_to(&self, x: f64) -> f64 {
        let d = (x - self.x0).clamp(0.0, self.x1 - self.x0);
        (self.y0 + self.at(self.x0 + d)) * 0.5 * d
    }

    /// The distance d from x0 where the area reaches `r` (0 <= r <= area).
    fn inverse(&self, r: f64) -> f64 {
        let len = self.x1 - self.x0;
        let k = (self.y1 - self.y0) / len;
        // y0 d + k d^2 / 2 = r, in the form that is stable for k near 0.
        let disc = (self.y0 * self.y0 + 2.0 * k * r).max(0.0);
        let denom = self.y0 + disc.sqrt();
        let d = if denom > 0.0 { 2.0 * r / denom } else { 0.0 };
        d.clamp(0.0, len)
    }
}

impl Shape {
    /// The shape of `[share, weight]` points: sorted by share, the first at 0, the last at
    /// 1, weights >= 0 and not all 0.
    pub fn new(points: &[[f64; 2]]) -> Result<Self, String> {
        if points.len() < 2 {
            return Err("needs at least two [share, weight] points".into());
        }
        if points.iter().flatten().any(|v| !v.is_finite()) {
            return Err("points must be finite numbers".into());
        }
        if points[0][0] != 0.0 || points[points.len() - 1][0] != 1.0 {
            return Err("the first point must be at share 0 and the last at share 1".into());
        }
        if points.windows(2).any(|w| w[1][0] < w[0][0]) {
            return Err("points must be sorted by share".into());
        }
        if points.iter().any(|p| p[1] < 0.0) {
            return Err("weights must not be negative".into());
        }
        let pieces: Vec<Piece> = points
            .windows(2)
            .filter(|w| w[1][0] > w[0][0])
            .map(|w| Piece {
                x0: w[0][0],
                x1: w[1][0],
                y0: w[0][1],
                y1: w[1][1],
            })
            .collect();
        Self::from_pieces(pieces).ok_or_else(|| {
            "weights must not all be 0, nor so large that their total overflows".into()
        })
    }

    /// Constant intensity.
    pub fn flat() -> Self {
        Self::from_pieces(vec![Piece {
            x0: 0.0,
            x1: 1.0,
            y0: 1.0,
            y1: 1.0,
        }])
        .unwrap_or_else(|| unreachable!("a flat shape has area 1"))
    }

    /// A step function: `weights[b]` on the b-th of equal parts of [0, 1].
    pub fn steps(weights: &[f64]) -> Option<Self> {
        let n = weights.len() as f64;
        let pieces = weights
            .iter()
            .enumerate()
            .map(|(b, w)| Piece {
                x0: b as f64 / n,
                x1: (b + 1) as f64 / n,
                y0: *w,
                y1: *w,
            })
            .collect();
        Self::from_pieces(pieces)
    }

    fn from_pieces(mut pieces: Vec<Piece>) -> Option<Self> {
        let total: f64 = pieces.iter().map(Piece::area).sum();
        if !(total > 0.0 && total.is_finite()) {
            return None;
        }
        let mut before = Vec::with_capacity(pieces.len());
        let mut acc = 0.0;
        for p in &mut pieces {
            p.y0 /= total;
            p.y1 /= total;
            before.push(acc);
            acc += p.area();
        }
        Some(Shape { pieces, before })
    }

    /// The weighted sum `sum_i w_i * shape_i`, normalised, and its total weight; `None`
    /// when the total is 0. Exact: the sum of piecewise-linear densities is one on the
    /// union of their breakpoints.
    pub fn sum(parts: &[(f64, &Shape)]) -> Option<(f64, Shape)> {
        let total: f64 = parts.iter().map(|(w, _)| *w).sum();
        if total <= 0.0 {
            return None;
        }
        let mut cuts: Vec<f64> = parts
            .iter()
            .flat_map(|(_, s)| s.pieces.iter().flat_map(|p| [p.x0, p.x1]))
            .collect();
        cuts.sort_by(f64::total_cmp);
        cuts.dedup();
        let pieces = cuts
            .windows(2)
            .map(|c| {
                let (y0, y1) = parts.iter().fold((0.0, 0.0), |(a, b), (w, s)| {
                    let (u, v) = s.density_between(c[0], c[1]);
                    (a + w * u, b + w * v)
                });
                Piece {
                    x0: c[0],
                    x1: c[1],
                    y0,
                    y1,
                }
            })
            .collect();
        Self::from_pieces(pieces).map(|s| (total, s))
    }

    fn piece_at(&self, x: f64) -> usize {
        self.pieces
            .partition_point(|p| p.x1 <= x)
            .min(self.pieces.len() - 1)
    }

    /// The density at the two ends of [a, b], which must lie within one piece of this
    /// shape (the limits from inside the interval, across jumps).
    pub fn density_between(&self, a: f64, b: f64) -> (f64, f64) {
        let p = self.pieces[self.piece_at((a + b) * 0.5)];
        (p.at(a), p.at(b))
    }

    /// The density at `x` (the right limit at a jump).
    pub fn density(&self, x: f64) -> f64 {
        self.pieces[self.piece_at(x)].at(x.clamp(0.0, 1.0))
    }

    /// The share of arrivals before `x` (0 at 0, 1 at 1).
    pub fn cumulative(&self, x: f64) -> f64 {
        if x <= 0.0 {
            return 0.0;
        }
        if x >= 1.0 {
            return 1.0;
        }
        let i = self.piece_at(x);
        (self.before[i] + self.pieces[i].area_to(x)).min(1.0)
    }

    /// The share `x` where the cumulative reaches `c` in [0, 1].
    pub fn inverse(&self, c: f64) -> f64 {
        let c = c.clamp(0.0, 1.0);
        let last = self.pieces.len() - 1;
        // The first piece whose end reaches c (pieces of no area are skipped), by bisection:
        // the ends grow with the index (a linear scan made a shape of 100,000 points take
        // minutes before the first run, an outside probe).
        let (mut lo, mut hi) = (0, self.pieces.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.before[mid] + self.pieces[mid].area() < c {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let i = lo.min(last);
        let p = &self.pieces[i];
        (p.x0 + p.inverse(c - self.before[i])).min(1.0)
    }

    /// Breakpoints (shares where the density changes slope or jumps).
    pub fn breakpoints(&self) -> impl Iterator<Item = f64> + '_ {
        self.pieces.iter().map(|p| p.x0).chain([1.0])
    }
}

// ---------------------------------------------------------------------------------------
// Willingness to pay

/// The distribution of a buyer's willingness to pay: P(buy at p) = P(WTP >= p).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wtp {
    /// P(buy) = exp(-p / mean).
    Exponential { mean: f64 },
    /// P(buy) = 1 / (1 + exp((p - location) / scale)).
    Logistic { location: f64, scale: f64 },
    /// P(buy) = (high - p) / (high - low), clipped to [0, 1].
    Uniform { low: f64, high: f64 },
}

impl Wtp {
    pub fn buy_probability(&self, p: f64) -> f64 {
        match *self {
            Wtp::Exponential { mean } => (-p.max(0.0) / mean).exp(),
            Wtp::Logistic { location, scale } => 1.0 / (1.0 + ((p - location) / scale).exp()),
            Wtp::Uniform { low, high } => ((high - p) / (high - low)).clamp(0.0, 1.0),
        }
    }

    /// A willingness to pay from a uniform draw `u` in (0, 1): the `p` with P(buy at p) = u.
    pub fn sample(&self, u: f64) -> f64 {
        match *self {
            Wtp::Exponential { mean } => -mean * u.ln(),
            Wtp::Logistic { location, scale } => location + scale * ((1.0 - u) / u).ln(),
            Wtp::Uniform { low, high } => high - u * (high - low),
        }
    }

    /// What one potential buyer is worth at price `p` when a unit sold is worth `delta`
    /// kept: P(buy at p) * (p - delta).
    pub fn gain(&self, p: f64, delta: f64) -> f64 {
        self.buy_probability(p) * (p - delta)
    }

    /// The price within [min, max] that maximises [`Wtp::gain`]. The gain is unimodal in
    /// p for the three distributions (their hazard rates increase), so the unconstrained
    /// optimum clamped to the bounds is the constrained one: in closed form for exponential
    /// (delta + mean) and uniform ((high + delta) / 2 within [low, high]), for logistic
    /// where its first-order condition `(p - delta) (1 - P(buy at p)) = scale` holds, by
    /// bisection (its left side increases in p above delta). A search on the gain itself
    /// (golden section) lost the optimum of a steep logistic: with a scale of 1e-11 the
    /// gain is 0 at both probes above the location, and the search kept the wrong side.
    pub fn best_price(&self, delta: f64, min: f64, max: f64) -> f64 {
        match *self {
            Wtp::Exponential { mean } => (delta + mean).clamp(min, max),
            Wtp::Uniform { low, high } => ((high + delta) * 0.5).clamp(low, high).clamp(min, max),
            Wtp::Logistic { location, scale } => {
                // Above 0 where the gain falls with p, below 0 where it rises.
                let slope = |p: f64| {
                    let not_buying = 1.0 / (1.0 + (-(p - location) / scale).exp());
                    (p - delta) * not_buying - scale
                };
                let (mut lo, mut hi) = (min.max(delta.min(max)), max);
                if slope(lo) >= 0.0 {
                    return lo;
                }
                if slope(hi) <= 0.0 {
                    return hi;
                }
                for _ in 0..200 {
                    let mid = 0.5 * (lo + hi);
                    if mid <= lo || mid >= hi {
                        break;
                    }
                    if slope(mid) > 0.0 {
                        hi = mid;
                    } else {
                        lo = mid;
                    }
                }
                // The optimum is between them; at a scale below the prices' resolution
                // they are neighbouring numbers with very different gains.
                if self.gain(lo, delta) >= self.gain(hi, delta) {
                    lo
                } else {
                    hi
                }
            }
        }
    }
}
