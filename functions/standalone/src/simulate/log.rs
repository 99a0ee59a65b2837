//! `simulate log`: an honest counterfactual for a logged instance.
//!
//! The log holds the buyers who bought at the prices that were charged, not those who would
//! have bought at other prices, so the logged sales cannot be re-priced. Instead:
//!
//! 1. The log is applied through the real apply step (instanceMetadata entries skipped:
//!    the instance's current meta is used), collecting every sale with its time, quantity
//!    and price paid.
//! 2. Demand is fitted per item ([`fit_item`]): buyers arrive as a Poisson process whose
//!    level is constant within each of up to 8 equal periods of the product's sales period
//!    and who buy with an exponential willingness to pay of mean m, so sales arrive at
//!    `level_b * exp(-price(t) / m)`. The price offered at t is the last of the item's
//!    stored calculated prices and the prices paid before t (the default before either);
//!    time after the product sold out counts as no exposure. For a given m each period's
//!    level has a closed-form estimate (shrunk towards the overall level by half a sale);
//!    m is the maximum a posteriori estimate with a log-normal prior of median the default
//!    price (elasticity -1 at the default) and a factor 2 per standard deviation: it is
//!    identified only when the log's prices varied and the estimate is inside its search
//!    (a fiftieth to 50 times the default), else the prior or the edge decides (and the
//!    report says so). A sale outside the item's sales period or while the instance was
//!    off sale has no exposure beside it: it is left out of the fit and counted apart.
//! 3. Each product becomes a market scenario with the fitted demand (its capacity,
//!    expectedSales and properties, the instance's meta and schedule), and every model is
//!    simulated against it in the same market machinery as `simulate market`: each model
//!    earns its own prices on its own sales, with the optimum, the fluid bound and the best
//!    fixed prices of the fitted demand beside them.

use std::collections::BTreeMap;

use indicatif::ProgressBar;
use pricing_core::entry::{Entry, EntryKind, ParseOptions, Schedule, parse_entry};
use pricing_core::ids::{
    InstanceId, InstanceKey, ItemId, ProductId, ProjectId, ProjectKey, TenantId,
};
use pricing_core::jws::decode_jws_payload;
use pricing_core::model::PageRequest;
use pricing_core::ports::{
    EntryLog, InstanceStore, PriceStore, ProjectStore, StateStore, StoreError,
};
use pricing_core::state::{Dirty, InstanceState};
use pricing_core::validate::Errors;
use pricing_embedded::EmbeddedStore;
use serde::Serialize;
use serde_json::Value;

use super::report::{Report, market_table, money};
use super::scenario::{
    Context, ItemMarket, MAX_ARRIVALS, MAX_TOTAL_ARRIVALS, Scenario, Shape, Wtp, golden_max,
};
use super::{ModelChoice, fail};
use crate::Error;
use crate::cli::LogArgs;

/// The database file inside a data directory (as `serve` names it).
const DATABASE_FILE: &str = "pricing.db";
/// Log entries and price history read per round trip.
const READ_PAGE: usize = 500;
/// Most periods of a fitted arrival shape; fewer with few sales (one per 15 units).
const MAX_PERIODS: usize = 8;
const UNITS_PER_PERIOD: u64 = 15;
/// The prior of the willingness-to-pay mean: median the default price, sd ln 2 in logs.
const PRIOR_SD: f64 = std::f64::consts::LN_2;
/// Log-likelihood range (nats) over m in [m0 / 4, 4 m0] below which m follows the prior.
const IDENTIFIED_NATS: f64 = 2.0;

pub const DEMAND_MODEL: &str = "per item: Poisson buyers, level constant in each of up to 8 equal periods of the sales period, exponential willingness to pay; fitted to the logged sales (times, quantities, prices paid) against the prices offered (stored calculations and prices paid) while units were left; the willingness-to-pay mean by MAP with a log-normal prior (median the default price, a factor 2 per sd)";

/// What `simulate log` reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogReport {
    pub project: String,
    pub instance: String,
    /// Log entries read, entries rejected as the processor rejects them, instanceMetadata
    /// entries skipped (the current meta is used).
    pub entries: u64,
    pub rejected: u64,
    pub metadata_skipped: u64,
    /// What the log earned and sold (net of returns).
    pub logged: Logged,
    pub method: &'static str,
    pub demand_model: &'static str,
    pub products: Vec<ProductReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Logged {
    pub revenue: f64,
    pub units: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProductReport {
    pub product_id: String,
    pub fit: Vec<ItemFit>,
    /// Why the product was not simulated (no capacity, no live items).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The share of the sales period the log has seen (less than 1 while the instance is
    /// on sale): the demand of the rest is read at the level the seen part showed.
    pub observed: f64,
    /// Why the fitted buyers were cut to the most a market holds (the fit is then not
    /// identified).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capped: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
    #[serde(skip)]
    pub scenario: Option<Scenario>,
}

/// The demand fitted to one item.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemFit {
    pub item_id: String,
    /// Units sold in the log (returns not counted) and the distinct prices they paid.
    pub units: u64,
    pub distinct_prices: usize,
    /// Of `units`, those sold outside the item's sales period or while the instance was
    /// not on sale: no exposure stands beside them, so the fit leaves them out.
    #[serde(skip_serializing_if = "is_zero")]
    pub units_outside: u64,
    /// Expected potential buyers over the sales period.
    pub arrivals: f64,
    /// Each period's share of the buyers.
    pub periods: Vec<f64>,
    /// The fitted willingness-to-pay mean and the elasticity it gives at the default price.
    pub wtp_mean: f64,
    pub elasticity_at_default: f64,
    /// Whether the log's price variation identified the mean (else the prior did).
    pub identified: bool,
    /// Whether the only price variation was in the prices the sales paid (no calculated
    /// price changed): each is read as the price in force from its sale on, so a log whose
    /// sales paid prices the service never set (discounts, sales sent later) identifies a
    /// mean from prices no buyer was offered, and the report says so.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub from_prices_paid: bool,
    /// Why the fit is not identified, when not for prices that hardly varied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

const METHOD: &str = "counterfactual: demand fitted to the log, then every model simulated against the fitted demand in the market of `simulate market` (each model's prices on its own sales)";

/// Runs `simulate log`.
pub async fn run(
    args: &LogArgs,
    models: &[ModelChoice],
    progress: &ProgressBar,
) -> Result<LogReport, Error> {
    let (store, key, held) = open_log(args).await?;
    let logged = read_log(&store, &key).await?;
    drop(store);
    drop(held);
    let mut report = counterfactual(&key, &logged, args.runs, args.seed)?;
    // Every product's work, and theirs together, before any is simulated: a product over
    // the cap found after the others ran would waste their work.
    let mut total = 0u64;
    for s in report.products.iter().filter_map(|p| p.scenario.as_ref()) {
        super::check_work(s, models.len())?;
        total = total.saturating_add(pricing_simulate::caps::work(s, models.len()));
    }
    if total > pricing_simulate::caps::MAX_FILE_WORK {
        return Err(super::fail(format!(
            "the products' simulations together are {total} of work, over the cap of {}: lower --runs or the models",
            pricing_simulate::caps::MAX_FILE_WORK
        )));
    }
    for product in &mut report.products {
        if let Some(s) = &product.scenario {
            progress.set_message(product.product_id.clone());
            progress.set_position(0);
            product.report = Some(Report::of(
                s,
                models,
                super::all_cores(),
                &super::Bar(progress),
            )?);
        }
    }
    Ok(report)
}

/// Opens the data directory's database and checks that the project and instance exist;
/// with the directory held while it is read, when no `serve` has it
/// ([`crate::datadir::hold_for_reading`]).
async fn open_log(
    args: &LogArgs,
) -> Result<(EmbeddedStore, InstanceKey, Option<std::fs::File>), Error> {
    let path = args.data.join(DATABASE_FILE);
    if !path.is_file() {
        return Err(fail(format!(
            "no database at {}: is --data the data directory of `standalone serve`?",
            path.display()
        )));
    }
    // Read only: the help promises the database is not changed (no schema upgrade, no
    // checkpoint), whether or not a service runs on it. Held, a database no process has
    // open is read as immutable (nothing made beside it).
    let held = crate::datadir::hold_for_reading(&args.data);
    let store = EmbeddedStore::open_read_only(&path, held.is_some())
        .map_err(|e| fail(format!("cannot open {}: {e}", path.display())))?;
    let key = instance_key(&store, &args.tenant, &args.project, &args.instance).await?;
    Ok((store, key, held))
}

fn store_error(what: &str) -> impl FnOnce(StoreError) -> Error + '_ {
    move |e| fail(format!("{what}: {e}"))
}

/// The key of an existing instance; errors name the project or instance that is missing.
pub async fn instance_key<S: ProjectStore + InstanceStore>(
    store: &S,
    tenant: &str,
    project: &str,
    instance: &str,
) -> Result<InstanceKey, Error> {
    let tenant = TenantId::from_claim(tenant).ok_or_else(|| {
        fail(format!(
            "--tenant {tenant:?}: must be 1 to 256 bytes (UTF-8)"
        ))
    })?;
    let project_id =
        ProjectId::parse(project).map_err(|e| fail(format!("--project {project}: {e}")))?;
    let project_key = ProjectKey::new(tenant, project_id);
    let instance_id =
        InstanceId::parse(instance).map_err(|e| fail(format!("--instance {instance}: {e}")))?;
    if store
        .get_project(&project_key)
        .await
        .map_err(store_error("reading the project"))?
        .is_none()
    {
        return Err(fail(format!(
            "project {project} not found for tenant {}",
            project_key.tenant
        )));
    }
    let key = project_key.instance(instance_id);
    if store
        .get_instance(&key)
        .await
        .map_err(store_error("reading the instance"))?
        .is_none()
    {
        return Err(fail(format!(
            "instance {instance} not found in project {project}"
        )));
    }
    Ok(key)
}

/// A logged sale (or return) of an item.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoggedSale {
    pub at: i64,
    pub quantity: i64,
    pub price: f64,
}

/// What the log says: the state after it, the sales and the prices offered per item.
#[derive(Debug, Clone, Default)]
pub struct LoggedInstance {
    /// When the log was read (ms): demand after it is not observed yet.
    pub read_at: i64,
    pub state: InstanceState,
    pub entries: u64,
    pub rejected: u64,
    pub metadata_skipped: u64,
    pub sales: BTreeMap<ItemId, Vec<LoggedSale>>,
    /// Stored calculated prices per item: (time in ms, price).
    pub offered: BTreeMap<ItemId, Vec<(i64, f64)>>,
}

/// Applies the log of `key` from its first entry (with the instance's current meta) and
/// reads each item's price history.
pub async fn read_log<S: EntryLog + StateStore + PriceStore>(
    store: &S,
    key: &InstanceKey,
) -> Result<LoggedInstance, Error> {
    let last = store
        .last_sequence(key)
        .await
        .map_err(store_error("reading the log"))?;
    if last == 0 {
        return Err(fail(format!(
            "instance {} of project {} has no entries in its log: nothing to fit",
            key.instance_id, key.project_id
        )));
    }
    let mut out = LoggedInstance {
        read_at: pricing_core::time::Timestamp::now().millis(),
        ..LoggedInstance::default()
    };
    out.state.header.meta = store
        .load_state(key)
        .await
        .map_err(store_error("reading the instance state"))?
        .header
        .meta;
    let mut dirty = Dirty::default();
    let mut after = 0;
    loop {
        let records = store
            .read(key, after, READ_PAGE)
            .await
            .map_err(store_error("reading the log"))?;
        let Some(tail) = records.last() else {
            break;
        };
        after = tail.sequence;
        for record in &records {
            out.entries += 1;
            let Some(entry) = decode(&record.jwt) else {
                // As the processor does: the entry is rejected, the sequence moves on.
                out.rejected += 1;
                out.state.header.applied_seq = record.sequence;
                continue;
            };
            if matches!(entry.kind, EntryKind::InstanceMetadata(_)) {
                out.metadata_skipped += 1;
                out.state.header.applied_seq = record.sequence;
                continue;
            }
            let applied = out.state.apply_logged(&entry, record.sequence, &mut dirty);
            dirty.clear();
            if applied.is_err() {
                out.rejected += 1;
                continue;
            }
            if let EntryKind::ItemSale(sale) = &entry.kind {
                let at = sale
                    .sold_at
                    .or(entry.timestamp)
                    .unwrap_or(record.received_at);
                out.sales
                    .entry(sale.item_id.clone())
                    .or_default()
                    .push(LoggedSale {
                        at: at.millis(),
                        quantity: sale.quantity,
                        price: sale.price.to_f64(),
                    });
            }
        }
    }
    let items: Vec<ItemId> = out.state.items.keys().cloned().collect();
    for item in items {
        let mut cursor = None;
        loop {
            let page = store
                .price_history(
                    key,
                    &item,
                    &PageRequest {
                        cursor,
                        limit: READ_PAGE,
                    },
                )
                .await
                .map_err(store_error("reading the price history"))?;
            out.offered.entry(item.clone()).or_default().extend(
                page.items
                    .iter()
                    .map(|h| (h.calculated_at.millis(), h.price.price.to_f64())),
            );
            match page.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    Ok(out)
}

/// Decodes and validates a stored entry as the processor does (`None`: it would reject it).
fn decode(jwt: &str) -> Option<Entry> {
    let payload = decode_jws_payload(jwt).ok()?;
    parse_entry(
        &payload,
        "",
        ParseOptions::default(),
        &mut Errors::default(),
    )
}

/// The fitted markets of a logged instance (one per product), not yet simulated.
pub fn counterfactual(
    key: &InstanceKey,
    log: &LoggedInstance,
    runs: u32,
    seed: u64,
) -> Result<LogReport, Error> {
    let runs = super::check_runs(runs)?;
    let (mut revenue, mut units) = (0.0, 0i64);
    for sale in log.sales.values().flatten() {
        revenue += sale.price * sale.quantity as f64;
        units += sale.quantity;
    }
    let products = log
        .state
        .products
        .keys()
        .map(|p| product_market(log, p, runs, seed))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LogReport {
        project: key.project_id.to_string(),
        instance: key.instance_id.to_string(),
        entries: log.entries,
        rejected: log.rejected,
        metadata_skipped: log.metadata_skipped,
        logged: Logged {
            revenue: (revenue * 100.0).round() / 100.0,
            units,
        },
        method: METHOD,
        demand_model: DEMAND_MODEL,
        products,
    })
}

fn product_market(
    log: &LoggedInstance,
    product_id: &ProductId,
    runs: u32,
    seed: u64,
) -> Result<ProductReport, Error> {
    let state = &log.state;
    let mut report = ProductReport {
        product_id: product_id.to_string(),
        fit: Vec::new(),
        skipped: None,
        observed: 1.0,
        capped: None,
        report: None,
        scenario: None,
    };
    let items: Vec<_> = state
        .items
        .values()
        .filter(|i| !i.removed && &i.product_id == product_id)
        .collect();
    let (Some(start), Some(end)) = (
        items
            .iter()
            .map(|i| i.properties.sales_period.start.millis())
            .min(),
        items
            .iter()
            .map(|i| i.properties.sales_period.end.millis())
            .max(),
    ) else {
        report.skipped = Some("no live items".into());
        return Ok(report);
    };
    let Some(product) = state.products.get(product_id) else {
        report.skipped = Some("not registered".into());
        return Ok(report);
    };
    let totals = state.product_totals();
    let capacity = totals
        .get(product_id)
        .and_then(|t| InstanceState::effective_capacity(product, t));
    let Some(capacity) = capacity.filter(|c| *c > 0) else {
        report.skipped = Some("no capacity: a market needs one".into());
        return Ok(report);
    };
    // Times when the product had units left: until its net sales reached the capacity.
    let mut product_sales: Vec<LoggedSale> = items
        .iter()
        .filter_map(|i| log.sales.get(&i.item_id))
        .flatten()
        .copied()
        .collect();
    product_sales.sort_by_key(|s| s.at);
    // Only the time up to the reading has been seen: after it the product's buyers are
    // unknown, not absent (read as absent, an instance half way through its period was fitted
    // half its demand and no buyers after today). A period with nothing seen is read at
    // the level of the seen ones (the fit's pseudo-count).
    let seen_until = log.read_at.clamp(start, end);
    report.observed = (seen_until - start) as f64 / (end - start).max(1) as f64;
    let open = open_intervals(&product_sales, capacity, start, seen_until);
    let bins = periods(product_sales.iter().map(|s| s.quantity.max(0) as u64).sum());
    let mut markets = Vec::new();
    for item in &items {
        let ps = &item.properties.price_settings;
        let observed = Observed {
            start: item.properties.sales_period.start.millis(),
            end: item.properties.sales_period.end.millis(),
            default: ps.default.to_f64(),
            offered: log.offered.get(&item.item_id).cloned().unwrap_or_default(),
            sales: log.sales.get(&item.item_id).cloned().unwrap_or_default(),
        };
        let (fit, shape) = fit_item(&observed, (start, end), &open, bins);
        markets.push(ItemMarket {
            item_id: item.item_id.clone(),
            min: ps.min.to_f64(),
            max: ps.max.to_f64(),
            default: ps.default.to_f64(),
            arrivals: fit.arrivals,
            shape,
            wtp: Wtp::Exponential { mean: fit.wtp_mean },
        });
        report.fit.push(ItemFit {
            item_id: item.item_id.to_string(),
            ..fit
        });
    }
    let mut template = match serde_json::to_value(&product.properties) {
        Ok(Value::Object(map)) => map,
        _ => return Err(fail(format!("product {product_id}: properties"))),
    };
    for key in ["capacity", "pricingModel", "expectedSales"] {
        template.remove(key);
    }
    // A fit can ask for more buyers than a market can hold: a sale at a low price right
    // after it was set (little exposure) reads as very price-sensitive buyers arriving in
    // great numbers (a probe found 10^8 and more: the simulation then ran out of memory).
    // Such buyers are cut to the scenario file's bounds, keeping the fit's shape and
    // willingness to pay, and the report says so.
    let asked: f64 = markets.iter().map(|m| m.arrivals).sum();
    let capped = |a: f64| {
        if a.is_finite() {
            a.min(MAX_ARRIVALS)
        } else {
            MAX_ARRIVALS
        }
    };
    let each: f64 = markets.iter().map(|m| capped(m.arrivals)).sum();
    let scale = (MAX_TOTAL_ARRIVALS / each).min(1.0);
    if !(asked <= MAX_TOTAL_ARRIVALS && markets.iter().all(|m| m.arrivals <= MAX_ARRIVALS)) {
        for (m, f) in markets.iter_mut().zip(report.fit.iter_mut()) {
            m.arrivals = capped(m.arrivals) * scale;
            f.arrivals = m.arrivals;
            f.identified = false;
            f.note = Some("the fitted buyers were cut to the most a market holds".to_owned());
        }
        report.capped = Some(format!(
            "the fit asked for {asked:.0} buyers; cut to {:.0}, the most a market holds: read this product's results as not identified",
            each * scale
        ));
    }
    let period_ms = end - start;
    let start = pricing_core::time::Timestamp::from_millis(start)
        .ok_or_else(|| fail("the sales period is out of range"))?;
    let scenario = Scenario {
        name: format!("log product {product_id}"),
        period_ms,
        slots: schedule_slots(state.header.schedule.as_ref(), period_ms),
        capacity,
        expected_sales: product.properties.expected_sales,
        items: markets,
        past_instances: 0,
        runs,
        seed,
        context: Context {
            start,
            meta: Some(state.header.meta.clone()),
            product: template,
            own_model: Some(product.properties.pricing_model.clone()),
        },
    };
    pricing_simulate::references::check_size(&scenario)
        .map_err(|e| fail(format!("product {product_id} (capacity {capacity}): {e}")))?;
    report.scenario = Some(scenario);
    Ok(report)
}

/// Scheduled calculations over a period of `period_ms` (hourly without a schedule).
fn schedule_slots(schedule: Option<&Schedule>, period_ms: i64) -> u64 {
    let days = period_ms as f64 / 86_400_000.0;
    let slots = match schedule.cloned().unwrap_or_default() {
        Schedule::IntervalSeconds(s) => period_ms as f64 / (s.max(1) as f64 * 1000.0),
        Schedule::TimesOfDay(times) => days * times.len().max(1) as f64,
    };
    (slots.ceil() as u64).clamp(1, 1_000_000)
}

/// Periods of the fitted shape for `units` sold.
fn periods(units: u64) -> usize {
    ((units / UNITS_PER_PERIOD) as usize).clamp(1, MAX_PERIODS)
}

/// The intervals of [start, end) in which the product had units left.
fn open_intervals(sales: &[LoggedSale], capacity: u64, start: i64, end: i64) -> Vec<(i64, i64)> {
    let mut open = Vec::new();
    let mut from = Some(start);
    let mut sold: i64 = 0;
    for s in sales {
        sold += s.quantity;
        let full = sold >= capacity as i64;
        match (from, full) {
            (Some(f), true) => {
                open.push((f, s.at.clamp(start, end)));
                from = None;
            }
            (None, false) => from = Some(s.at.clamp(start, end)),
            _ => {}
        }
    }
    if let Some(f) = from {
        open.push((f, end));
    }
    open.retain(|(a, b)| b > a);
    open
}

/// What the log shows of one item.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The item's sales period (ms).
    pub start: i64,
    pub end: i64,
    pub default: f64,
    /// Stored calculated prices: (time, price).
    pub offered: Vec<(i64, f64)>,
    pub sales: Vec<LoggedSale>,
}

/// Fits one item's demand (see the module notes) over the product's `period`, with
/// exposure only in `open` intervals and `bins` periods. Returns the fit and the shape.
pub fn fit_item(
    item: &Observed,
    period: (i64, i64),
    open: &[(i64, i64)],
    bins: usize,
) -> (ItemFit, Shape) {
    let length = (period.1 - period.0).max(1) as f64;
    let share = |t: i64| ((t - period.0) as f64 / length).clamp(0.0, 1.0);
    // The offered price path: the last calculated price or price paid before t.
    let mut events: Vec<(i64, f64)> = item.offered.clone();
    events.extend(item.sales.iter().map(|s| (s.at, s.price)));
    events.sort_by_key(|e| e.0);
    // Exposure pieces (bin, share length, price): the item's period, open, cut at bins and
    // price changes.
    let mut cuts: Vec<i64> = vec![item.start.max(period.0), item.end.min(period.1)];
    cuts.extend(events.iter().map(|e| e.0));
    cuts.extend(open.iter().flat_map(|(a, b)| [*a, *b]));
    cuts.extend((1..bins).map(|b| period.0 + (length * b as f64 / bins as f64) as i64));
    cuts.retain(|t| *t >= item.start.max(period.0) && *t <= item.end.min(period.1));
    cuts.sort_unstable();
    cuts.dedup();
    let mut exposure: Vec<(usize, f64, f64)> = Vec::new();
    let (mut price, mut next_event) = (item.default, 0);
    for w in cuts.windows(2) {
        while let Some(e) = events.get(next_event).filter(|e| e.0 <= w[0]) {
            price = e.1;
            next_event += 1;
        }
        let mid = w[0] + (w[1] - w[0]) / 2;
        if !open.iter().any(|(a, b)| *a <= mid && mid < *b) {
            continue;
        }
        let bin = ((share(mid) * bins as f64) as usize).min(bins - 1);
        exposure.push((bin, share(w[1]) - share(w[0]), price));
    }
    let mut counts = vec![0.0f64; bins];
    let mut paid = 0.0;
    let (mut units, mut outside) = (0u64, 0u64);
    // Prices compared in cents (the paid ones among themselves and with the ones set).
    let cents = |p: f64| (p * 100.0).round() as i64;
    let mut prices: Vec<i64> = Vec::new();
    // A sale counts where the exposure does: within the item's period and the product's
    // (an item's sales before it opened were put in its first period, where no exposure
    // stood beside them, and read as a fit "identified" with no buyers) and while on sale.
    let (from, to) = (item.start.max(period.0), item.end.min(period.1));
    let exposed = |t: i64| t >= from && t <= to && open.iter().any(|(a, b)| *a <= t && t <= *b);
    for s in item.sales.iter().filter(|s| s.quantity > 0) {
        prices.push(cents(s.price));
        units += s.quantity as u64;
        if !exposed(s.at) {
            outside += s.quantity as u64;
            continue;
        }
        let bin = ((share(s.at) * bins as f64) as usize).min(bins - 1);
        counts[bin] += s.quantity as f64;
        paid += s.price * s.quantity as f64;
    }
    prices.sort_unstable();
    prices.dedup();
    let in_period: Vec<bool> = (0..bins)
        .map(|b| {
            let (lo, hi) = (b as f64 / bins as f64, (b + 1) as f64 / bins as f64);
            share(item.start) < hi && share(item.end) > lo
        })
        .collect();
    let n: f64 = counts.iter().sum();
    let m0 = item.default.max(0.01);
    // Per-period levels for a mean m, and the log-likelihood.
    let levels = |m: f64| -> (Vec<f64>, f64) {
        let mut e = vec![0.0f64; bins];
        for (bin, len, price) in &exposure {
            e[*bin] += len * (-price / m).exp();
        }
        let total: f64 = e.iter().sum();
        let overall = if total > 0.0 { n / total } else { 0.0 };
        let mut ll = -paid / m;
        let levels = (0..bins)
            .map(|b| {
                if !in_period[b] || overall <= 0.0 {
                    return 0.0;
                }
                let c = (counts[b] + 0.5) / (e[b] + 0.5 / overall);
                ll += counts[b] * c.ln() - c * e[b];
                c
            })
            .collect();
        (levels, ll)
    };
    let prior = |m: f64| -(m / m0).ln().powi(2) / (2.0 * PRIOR_SD * PRIOR_SD);
    let (lo, hi) = ((m0 / 50.0).ln(), (m0 * 50.0).ln());
    let log_m = golden_max(|x| levels(x.exp()).1 + prior(x.exp()), lo, hi, 1e-10);
    let m = log_m.exp();
    // At an end of the search the data asked for a mean further out still (a sale at a
    // low price right after it was set reads as buyers who hardly pay anything).
    let at_edge = (log_m - lo).abs() < 1e-6 || (hi - log_m).abs() < 1e-6;
    let (c, _) = levels(m);
    let spread = (0..=40)
        .map(|j| levels(m0 * 4f64.powf(j as f64 / 20.0 - 1.0)).1)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    // Levels are per unit of share; each period is 1 / bins of it.
    let arrivals: f64 = c.iter().sum::<f64>() / bins as f64;
    let shape = Shape::steps(&c).unwrap_or_else(Shape::flat);
    let identified = n > 0.0 && spread.1 - spread.0 >= IDENTIFIED_NATS && !at_edge;
    let fit = ItemFit {
        item_id: String::new(),
        units,
        distinct_prices: prices.len(),
        units_outside: outside,
        arrivals,
        periods: c
            .iter()
            .map(|l| {
                if arrivals > 0.0 {
                    l / bins as f64 / arrivals
                } else {
                    0.0
                }
            })
            .collect(),
        wtp_mean: m,
        elasticity_at_default: -item.default / m,
        identified,
        from_prices_paid: identified && {
            // The prices the service set (its calculations, and the default before them)
            // did not vary, and the prices paid differ from them: the path's changes are
            // the sales' own.
            let mut calculated: Vec<i64> = item
                .offered
                .iter()
                .map(|(_, p)| cents(*p))
                .chain([cents(item.default)])
                .collect();
            calculated.sort_unstable();
            calculated.dedup();
            calculated.len() < 2 && prices.iter().any(|p| !calculated.contains(p))
        },
        note: at_edge.then(|| {
            "the fit rests on the edge of its search (a mean 50 times below or above the default): the log cannot tell it"
                .to_owned()
        }),
    };
    (fit, shape)
}

impl LogReport {
    pub fn to_json(&self) -> Result<String, Error> {
        serde_json::to_string_pretty(self).map_err(|e| fail(format!("the report: {e}")))
    }

    /// The readable form.
    pub fn table(&self) -> String {
        let mut out = format!(
            "instance {} of project {}: {} entries ({} rejected, {} instanceMetadata skipped: the current meta is used)\nlogged: revenue {}, {} units\n\n{}.\ndemand model: {}.\n",
            self.instance,
            self.project,
            self.entries,
            self.rejected,
            self.metadata_skipped,
            money(self.logged.revenue),
            self.logged.units,
            METHOD,
            DEMAND_MODEL,
        );
        for p in &self.products {
            out.push_str(&format!("\nproduct {}", p.product_id));
            if let Some(why) = &p.skipped {
                out.push_str(&format!(": not simulated ({why})\n"));
                continue;
            }
            out.push('\n');
            if p.observed < 1.0 {
                out.push_str(&format!(
                    "  on sale: the log has seen {:.0}% of the sales period; the demand of the rest is read at the level the seen part showed\n",
                    p.observed * 100.0
                ));
            }
            if let Some(why) = &p.capped {
                out.push_str(&format!(
                    "  {why}
"
                ));
            }
            for f in &p.fit {
                let periods = f
                    .periods
                    .iter()
                    .map(|s| format!("{:.0}%", s * 100.0))
                    .collect::<Vec<_>>()
                    .join(" ");
                let outside = if f.units_outside > 0 {
                    format!(
                        " ({} outside the sales period or while off sale, left out of the fit)",
                        f.units_outside
                    )
                } else {
                    String::new()
                };
                let basis = match (&f.note, f.identified) {
                    (Some(note), _) => format!("not identified: {note}"),
                    (None, true) if f.from_prices_paid => {
                        "identified by the prices the sales paid (no calculated price changed: each is read as the price in force from its sale on)".to_owned()
                    }
                    (None, true) => "identified by the log's price changes".to_owned(),
                    (None, false) if f.units == f.units_outside => {
                        "no sale to fit: the prior decides".to_owned()
                    }
                    (None, false) => "the log's prices hardly varied: the prior decides".to_owned(),
                };
                out.push_str(&format!(
                    "  item {}: {} units sold{outside} at {} price{}; fitted {:.1} buyers (by period: {periods}), willingness to pay exponential, mean {} (elasticity {:.2} at the default price; {basis})\n",
                    f.item_id,
                    f.units,
                    f.distinct_prices,
                    if f.distinct_prices == 1 { "" } else { "s" },
                    f.arrivals,
                    money(f.wtp_mean),
                    f.elasticity_at_default,
                ));
            }
            if let (Some(s), Some(r)) = (&p.scenario, &p.report) {
                let table = market_table(s, r);
                out.push_str(&table.replacen(&format!("scenario {}: ", r.scenario), "market: ", 1));
            }
        }
        out
    }
}
