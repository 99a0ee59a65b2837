//! Pages bounded by bytes as well as by count: a Lambda response may hold at most 6 MB
//! (API Gateway passes the body inside a JSON document, so quotes count twice), and a page
//! of large records (88 KB log entries, deliveries with their reports, whole price lists)
//! reaches that long before the count limit. Every listing stops before the record that
//! would take its `items` past [`MAX_PAGE_BYTES`] of JSON, and `next` continues from
//! there; a page always holds at least one record, so paging always progresses.

use std::future::Future;

use pricing_core::model::{Page, PageRequest};
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiResult;

/// The most JSON bytes of one page's `items`.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// The most JSON bytes of each list inlined in a details response (the instance's item and
/// product summaries, a product's item ids): the response stays near 1 MiB with its other
/// fields (metadata documents are at most 64 KiB).
pub const MAX_INLINE_BYTES: usize = 512 * 1024;

/// The length of `value` as compact JSON (what the response writes), without building it.
pub fn json_len(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing our own views into a counter cannot fail; a failure would count short
    // and the response would fail the same way.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The bytes left for the elements of one JSON array.
#[derive(Debug, Clone)]
pub struct Budget {
    max: usize,
    used: usize,
    taken: usize,
}

impl Budget {
    pub fn new(max: usize) -> Self {
        Budget {
            max,
            used: 0,
            taken: 0,
        }
    }

    /// Takes an element of `bytes` if it fits (with its separating comma). The first
    /// element always fits, so that a page always progresses.
    pub fn take(&mut self, bytes: usize) -> bool {
        let cost = bytes + usize::from(self.taken > 0);
        if self.taken > 0 && self.used + cost > self.max {
            return false;
        }
        self.used += cost;
        self.taken += 1;
        true
    }

    /// Elements taken so far.
    pub fn taken(&self) -> usize {
        self.taken
    }

    /// Bytes used so far.
    pub fn used(&self) -> usize {
        self.used
    }
}

/// How many of `views`, from the first, fit in `max` bytes (at least one if any).
pub fn fitting(views: &[Value], max: usize) -> usize {
    let mut budget = Budget::new(max);
    views
        .iter()
        .take_while(|v| budget.take(json_len(v)))
        .count()
}

/// A page of a store listing bounded by [`MAX_PAGE_BYTES`]: when the store's page is too
/// large, the store is asked again from the same cursor for only the records that fit, so
/// that its own (opaque) cursor continues right after them. Each retry asks for fewer
/// records, so this ends (a page of one always fits).
pub async fn store_page<T, F, Fut>(
    mut request: PageRequest,
    mut fetch: F,
    view: impl Fn(&T) -> Value,
) -> ApiResult<(Vec<Value>, Option<String>)>
where
    F: FnMut(PageRequest) -> Fut,
    Fut: Future<Output = ApiResult<Page<T>>>,
{
    loop {
        let page = fetch(request.clone()).await?;
        let views: Vec<Value> = page.items.iter().map(&view).collect();
        let fit = fitting(&views, MAX_PAGE_BYTES);
        if fit >= views.len() {
            return Ok((views, page.next));
        }
        request.limit = fit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_len_is_the_written_length() {
        for v in [
            json!(null),
            json!({"a": [1, 2, "x\"y"], "b": "é"}),
            json!("x".repeat(1000)),
        ] {
            assert_eq!(json_len(&v), serde_json::to_vec(&v).expect("json").len());
        }
    }

    #[test]
    fn a_budget_counts_commas_and_always_takes_the_first() {
        let mut b = Budget::new(10);
        assert!(b.take(20), "the first element always fits");
        assert!(!b.take(1));
        let mut b = Budget::new(10);
        assert!(b.take(4));
        assert!(b.take(4), "4 + 1 + 4 = 9");
        assert!(!b.take(1), "9 + 1 + 1 = 11");
        assert_eq!((b.taken(), b.used()), (2, 9));
        // The array's elements joined by commas take exactly what the budget counted.
        let views = vec![json!("ab"), json!("cd"), json!("ef")];
        let n = fitting(&views, 9);
        assert_eq!(n, 2);
        let array = serde_json::to_vec(&views[..n]).expect("json");
        assert_eq!(array.len(), 9 + 2, "brackets aside");
    }

    #[tokio::test]
    async fn a_store_page_is_asked_again_for_what_fits() {
        // A store of 10 records of 300 KiB each, cursor = index of the last one returned.
        let records: Vec<String> = (0..10)
            .map(|i| format!("{i}{}", "x".repeat(300 * 1024)))
            .collect();
        let mut asked = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = Vec::new();
        loop {
            let request = PageRequest {
                cursor: cursor.clone(),
                limit: 100,
            };
            let (items, next) = store_page(
                request,
                |p: PageRequest| {
                    asked.push(p.limit);
                    let start = p
                        .cursor
                        .as_deref()
                        .map_or(0, |c| c.parse::<usize>().unwrap_or(0) + 1);
                    let end = (start + p.limit).min(records.len());
                    let page = Page {
                        items: records[start..end].to_vec(),
                        next: (end < records.len()).then(|| (end - 1).to_string()),
                    };
                    async move { Ok(page) }
                },
                |r: &String| json!(r),
            )
            .await
            .expect("page");
            assert!(
                json_len(&items) <= MAX_PAGE_BYTES + 2,
                "{}",
                json_len(&items)
            );
            seen.extend(
                items
                    .iter()
                    .map(|v| v.as_str().unwrap_or_default()[..1].to_owned()),
            );
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
        assert_eq!(asked[..2], [100, 3], "asked again for the 3 that fit");
    }
}
