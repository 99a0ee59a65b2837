//! Price match rules: `price(itemId) = price(sourceItemId) * ratio + offset`, applied after
//! the models in topological order. Cycles (a self-match included) and a target with two
//! rules are refused when a rule set is stored ([`validate_matches`]); the engine itself
//! never loops, whatever rule set it is given.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::ids::{ItemId, MatchId};
use crate::money::Money;
use crate::state::InstanceState;

/// One price match rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriceMatch {
    pub match_id: MatchId,
    /// The target: the item whose price is set.
    pub item_id: ItemId,
    /// The item whose price it follows.
    pub source_item_id: ItemId,
    /// `>= 0`; default 1.
    #[serde(default = "one")]
    pub ratio: f64,
    /// May be negative; default 0.
    #[serde(default)]
    pub offset: Money,
}

fn one() -> f64 {
    1.0
}

impl PriceMatch {
    pub fn ratio_is_valid(&self) -> bool {
        self.ratio.is_finite() && self.ratio >= 0.0
    }
}

/// Why a rule set is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "code", rename_all = "camelCase")]
pub enum MatchRuleError {
    #[error("price match {match_id}: ratio must be a finite number of at least 0")]
    #[serde(rename_all = "camelCase")]
    InvalidRatio { match_id: MatchId },
    #[error("match id {match_id} is used by more than one rule")]
    #[serde(rename_all = "camelCase")]
    DuplicateMatchId { match_id: MatchId },
    #[error(
        "item {item_id} is the target of more than one rule: {}",
        join(match_ids)
    )]
    #[serde(rename_all = "camelCase")]
    DuplicateTarget {
        item_id: ItemId,
        match_ids: Vec<MatchId>,
    },
    /// `match_ids[k]` makes `item_ids[k]` follow `item_ids[k + 1]` (cyclically); one rule
    /// for a self-match.
    #[error(
        "price matches may not form a cycle: {}",
        cycle_text(match_ids, item_ids)
    )]
    #[serde(rename_all = "camelCase")]
    Cycle {
        match_ids: Vec<MatchId>,
        item_ids: Vec<ItemId>,
    },
}

fn join(ids: &[MatchId]) -> String {
    ids.iter()
        .map(MatchId::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn cycle_text(match_ids: &[MatchId], item_ids: &[ItemId]) -> String {
    let rules: Vec<String> = match_ids
        .iter()
        .zip(item_ids)
        .enumerate()
        .map(|(k, (m, item))| {
            let source = &item_ids[(k + 1) % item_ids.len()];
            format!("{m} ({item} follows {source})")
        })
        .collect();
    rules.join(", ")
}

/// Why a rule did not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SkipReason {
    /// The target item is not registered.
    TargetMissing,
    /// The target item was removed: removed items are never priced.
    TargetRemoved,
    /// The source item is not registered.
    SourceMissing,
    /// The source item was removed.
    SourceRemoved,
    /// The ratio is negative or not finite.
    InvalidRatio,
    /// An earlier rule (in the given order) already targets the item.
    DuplicateTarget,
    /// The rule is part of a cycle.
    InCycle,
    /// The target keeps its price in this calculation (not eligible), so no rule changes it.
    TargetKept,
}

/// A rule that did not apply, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedMatch {
    pub match_id: MatchId,
    pub item_id: ItemId,
    pub source_item_id: ItemId,
    pub reason: SkipReason,
}

impl SkippedMatch {
    fn new(rule: &PriceMatch, reason: SkipReason) -> Self {
        SkippedMatch {
            match_id: rule.match_id.clone(),
            item_id: rule.item_id.clone(),
            source_item_id: rule.source_item_id.clone(),
            reason,
        }
    }
}

/// An accepted rule set: rules that cannot apply now (items missing or removed) are kept
/// but listed here; they apply once their items exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchValidation {
    pub skipped: Vec<SkippedMatch>,
}

/// Validates a whole rule set (the stored rules after a change) against an instance.
/// Refuses invalid ratios, reused match ids, a target with two rules and cycles; cycles are
/// looked for over all rules, whether their items exist yet or not, so that registering an
/// item later cannot close a cycle. Rules whose items are missing or removed are accepted
/// and reported as skipped.
pub fn validate_matches(
    rules: &[PriceMatch],
    state: &InstanceState,
) -> Result<MatchValidation, MatchRuleError> {
    if let Some(r) = rules.iter().find(|r| !r.ratio_is_valid()) {
        return Err(MatchRuleError::InvalidRatio {
            match_id: r.match_id.clone(),
        });
    }
    let mut ids: HashMap<&MatchId, ()> = HashMap::with_capacity(rules.len());
    for r in rules {
        if ids.insert(&r.match_id, ()).is_some() {
            return Err(MatchRuleError::DuplicateMatchId {
                match_id: r.match_id.clone(),
            });
        }
    }
    let mut by_target: BTreeMap<&ItemId, Vec<usize>> = BTreeMap::new();
    for (i, r) in rules.iter().enumerate() {
        by_target.entry(&r.item_id).or_default().push(i);
    }
    if let Some((item, list)) = by_target.iter().find(|(_, l)| l.len() > 1) {
        return Err(MatchRuleError::DuplicateTarget {
            item_id: (*item).clone(),
            match_ids: list.iter().map(|&i| rules[i].match_id.clone()).collect(),
        });
    }
    let edges: HashMap<&ItemId, usize> = by_target.iter().map(|(k, l)| (*k, l[0])).collect();
    if let Some(cycle) = cycles(rules, &edges, true).into_iter().next() {
        return Err(MatchRuleError::Cycle {
            match_ids: cycle.iter().map(|&i| rules[i].match_id.clone()).collect(),
            item_ids: cycle.iter().map(|&i| rules[i].item_id.clone()).collect(),
        });
    }
    let skipped = rules
        .iter()
        .filter_map(|r| {
            presence(r, state)
                .err()
                .map(|reason| SkippedMatch::new(r, reason))
        })
        .collect();
    Ok(MatchValidation { skipped })
}

/// Whether both items of a rule are live in `state`.
fn presence(rule: &PriceMatch, state: &InstanceState) -> Result<(), SkipReason> {
    match state.items.get(&rule.item_id) {
        None => return Err(SkipReason::TargetMissing),
        Some(i) if i.removed => return Err(SkipReason::TargetRemoved),
        Some(_) => {}
    }
    match state.items.get(&rule.source_item_id) {
        None => Err(SkipReason::SourceMissing),
        Some(i) if i.removed => Err(SkipReason::SourceRemoved),
        Some(_) => Ok(()),
    }
}

/// The cycles of the graph target -> source given by `edges` (at most one rule per target),
/// each as rule indices in path order, found from the rules in input order. With
/// `first_only` the search stops at the first cycle.
fn cycles(
    rules: &[PriceMatch],
    edges: &HashMap<&ItemId, usize>,
    first_only: bool,
) -> Vec<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Color {
        OnPath,
        Done,
    }
    let mut color: HashMap<&ItemId, Color> = HashMap::with_capacity(edges.len());
    let mut found = Vec::new();
    let mut path: Vec<&ItemId> = Vec::new();
    for rule in rules {
        let start = &rule.item_id;
        if color.contains_key(start) || edges.get(start).is_none() {
            continue;
        }
        path.clear();
        let mut node = start;
        loop {
            match color.get(node) {
                None => {
                    color.insert(node, Color::OnPath);
                    path.push(node);
                    match edges.get(node) {
                        Some(&i) if edges.contains_key(&rules[i].source_item_id) => {
                            node = &rules[i].source_item_id;
                        }
                        _ => break,
                    }
                }
                Some(Color::OnPath) => {
                    let from = path.iter().position(|n| *n == node).unwrap_or(0);
                    found.push(path[from..].iter().map(|n| edges[n]).collect());
                    break;
                }
                Some(Color::Done) => break,
            }
        }
        for n in &path {
            color.insert(n, Color::Done);
        }
        if first_only && !found.is_empty() {
            break;
        }
    }
    found
}

/// The rules to apply, in an order where a rule's source is final before it is read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Plan<'a> {
    pub order: Vec<&'a PriceMatch>,
    pub skipped: Vec<(&'a PriceMatch, SkipReason)>,
}

/// Plans any rule set without refusing it: rules with missing or removed items, invalid
/// ratios, a second rule for a target (in the given order) and rules on a cycle are
/// skipped; the rest are ordered by dependency depth, then by the given order.
pub(crate) fn plan<'a>(rules: &'a [PriceMatch], state: &InstanceState) -> Plan<'a> {
    let mut plan = Plan::default();
    if rules.is_empty() {
        return plan;
    }
    let mut edges: HashMap<&ItemId, usize> = HashMap::with_capacity(rules.len());
    let mut accepted = vec![false; rules.len()];
    for (i, r) in rules.iter().enumerate() {
        let verdict = if !r.ratio_is_valid() {
            Err(SkipReason::InvalidRatio)
        } else {
            presence(r, state)
        };
        match verdict {
            Err(reason) => plan.skipped.push((r, reason)),
            Ok(()) if edges.contains_key(&r.item_id) => {
                plan.skipped.push((r, SkipReason::DuplicateTarget));
            }
            Ok(()) => {
                edges.insert(&r.item_id, i);
                accepted[i] = true;
            }
        }
    }
    for cycle in cycles(rules, &edges, false) {
        for i in cycle {
            accepted[i] = false;
            edges.remove(&rules[i].item_id);
            plan.skipped.push((&rules[i], SkipReason::InCycle));
        }
    }
    // Depth of a target = 1 + depth of its source when the source is itself a target.
    // The remaining graph is acyclic, so the walks end.
    let mut depth: HashMap<&ItemId, usize> = HashMap::with_capacity(edges.len());
    let mut chain: Vec<&ItemId> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        if !accepted[i] || depth.contains_key(&r.item_id) {
            continue;
        }
        chain.clear();
        let mut node = &r.item_id;
        let mut base = 0;
        loop {
            if let Some(&d) = depth.get(node) {
                base = d + 1;
                break;
            }
            chain.push(node);
            match edges.get(node) {
                Some(&j) if edges.contains_key(&rules[j].source_item_id) => {
                    node = &rules[j].source_item_id;
                }
                _ => break,
            }
        }
        for (k, n) in chain.iter().rev().enumerate() {
            depth.insert(n, base + k);
        }
    }
    let mut order: Vec<(usize, usize)> = (0..rules.len())
        .filter(|&i| accepted[i])
        .map(|i| (depth[&rules[i].item_id], i))
        .collect();
    order.sort_unstable();
    plan.order = order.into_iter().map(|(_, i)| &rules[i]).collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::testkit::*;

    fn rule(id: &str, target: &str, source: &str) -> PriceMatch {
        PriceMatch {
            match_id: MatchId::parse(id).unwrap(),
            item_id: ItemId::parse(target).unwrap(),
            source_item_id: ItemId::parse(source).unwrap(),
            ratio: 1.0,
            offset: Money::ZERO,
        }
    }

    fn state_with(items: &[&str]) -> InstanceState {
        let mut b = Builder::new();
        b.product("p", Product::default());
        for i in items {
            b.item(i, "p", Item::default());
        }
        b.state
    }

    fn ids(v: &[MatchId]) -> Vec<&str> {
        v.iter().map(MatchId::as_str).collect()
    }

    #[test]
    fn a_cycle_is_refused_and_named() {
        let s = state_with(&["a", "b", "c", "d"]);
        let rules = [
            rule("m0", "d", "a"),
            rule("m1", "a", "b"),
            rule("m2", "b", "c"),
            rule("m3", "c", "a"),
        ];
        let err = validate_matches(&rules, &s).unwrap_err();
        let MatchRuleError::Cycle {
            match_ids,
            item_ids,
        } = &err
        else {
            panic!("{err:?}")
        };
        // Found from m0 (d -> a), the cycle itself starts at a.
        assert_eq!(ids(match_ids), ["m1", "m2", "m3"]);
        assert_eq!(
            item_ids.iter().map(ItemId::as_str).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(
            err.to_string(),
            "price matches may not form a cycle: m1 (a follows b), m2 (b follows c), m3 (c follows a)"
        );
        let json = serde_json::to_value(&err).unwrap();
        assert_eq!(json["code"], "cycle");
        assert_eq!(json["matchIds"], serde_json::json!(["m1", "m2", "m3"]));
    }

    #[test]
    fn a_self_match_is_a_cycle_of_one() {
        let s = state_with(&["a"]);
        let err = validate_matches(&[rule("self", "a", "a")], &s).unwrap_err();
        assert!(
            matches!(&err, MatchRuleError::Cycle { match_ids, .. } if ids(match_ids) == ["self"])
        );
    }

    #[test]
    fn a_cycle_through_items_not_registered_yet_is_refused() {
        let s = state_with(&["a"]);
        let err = validate_matches(&[rule("m1", "a", "x"), rule("m2", "x", "a")], &s).unwrap_err();
        assert!(matches!(err, MatchRuleError::Cycle { .. }));
    }

    #[test]
    fn two_rules_for_one_target_are_refused() {
        let s = state_with(&["a", "b", "c"]);
        let err = validate_matches(&[rule("m1", "a", "b"), rule("m2", "a", "c")], &s).unwrap_err();
        assert_eq!(
            err,
            MatchRuleError::DuplicateTarget {
                item_id: ItemId::parse("a").unwrap(),
                match_ids: vec![MatchId::parse("m1").unwrap(), MatchId::parse("m2").unwrap()],
            }
        );
    }

    #[test]
    fn bad_ratios_and_reused_ids_are_refused() {
        let s = state_with(&["a", "b", "c"]);
        let mut r = rule("m1", "a", "b");
        r.ratio = -0.5;
        assert!(matches!(
            validate_matches(&[r], &s),
            Err(MatchRuleError::InvalidRatio { .. })
        ));
        assert!(matches!(
            validate_matches(&[rule("m1", "a", "b"), rule("m1", "c", "b")], &s),
            Err(MatchRuleError::DuplicateMatchId { .. })
        ));
    }

    #[test]
    fn rules_with_missing_items_are_accepted_but_skipped() {
        let mut s = state_with(&["a", "b", "gone"]);
        s.items
            .get_mut(&ItemId::parse("gone").unwrap())
            .unwrap()
            .removed = true;
        let v = validate_matches(
            &[
                rule("ok", "a", "b"),
                rule("m1", "x", "a"),
                rule("m2", "b", "y"),
                rule("m3", "gone", "a"),
            ],
            &s,
        )
        .unwrap();
        let got: Vec<(&str, SkipReason)> = v
            .skipped
            .iter()
            .map(|s| (s.match_id.as_str(), s.reason))
            .collect();
        assert_eq!(
            got,
            [
                ("m1", SkipReason::TargetMissing),
                ("m2", SkipReason::SourceMissing),
                ("m3", SkipReason::TargetRemoved)
            ]
        );
    }

    #[test]
    fn the_plan_orders_by_dependency() {
        let s = state_with(&["a", "b", "c", "d"]);
        // Given in reverse: d follows c follows b follows a.
        let rules = [
            rule("m3", "d", "c"),
            rule("m2", "c", "b"),
            rule("m1", "b", "a"),
        ];
        let p = plan(&rules, &s);
        assert_eq!(
            p.order
                .iter()
                .map(|r| r.match_id.as_str())
                .collect::<Vec<_>>(),
            ["m1", "m2", "m3"]
        );
        assert!(p.skipped.is_empty());
    }

    #[test]
    fn the_plan_skips_cycles_and_second_rules_without_looping() {
        let s = state_with(&["a", "b", "c", "d"]);
        let rules = [
            rule("c1", "a", "b"),
            rule("c2", "b", "a"),
            rule("dup", "a", "c"),
            rule("ok", "d", "a"),
            rule("self", "c", "c"),
        ];
        let p = plan(&rules, &s);
        assert_eq!(
            p.order
                .iter()
                .map(|r| r.match_id.as_str())
                .collect::<Vec<_>>(),
            ["ok"]
        );
        let mut skipped: Vec<(&str, SkipReason)> = p
            .skipped
            .iter()
            .map(|(r, why)| (r.match_id.as_str(), *why))
            .collect();
        skipped.sort();
        assert_eq!(
            skipped,
            [
                ("c1", SkipReason::InCycle),
                ("c2", SkipReason::InCycle),
                ("dup", SkipReason::DuplicateTarget),
                ("self", SkipReason::InCycle)
            ]
        );
    }

    #[test]
    fn rules_deserialize_with_defaults() {
        let r: PriceMatch =
            serde_json::from_str(r#"{"matchId":"m","itemId":"a","sourceItemId":"b"}"#).unwrap();
        assert_eq!((r.ratio, r.offset), (1.0, Money::ZERO));
        let r: PriceMatch = serde_json::from_str(
            r#"{"matchId":"m","itemId":"a","sourceItemId":"b","ratio":0.5,"offset":-2.5}"#,
        )
        .unwrap();
        assert_eq!((r.ratio, r.offset), (0.5, Money::from_micros(-2_500_000)));
    }
}
