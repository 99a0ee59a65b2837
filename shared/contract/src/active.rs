//! ActiveInstances: the scheduler's view of instances with the active flag, with their
//! schedule, paged; flag changes through `put_instance` show at once.

use pricing_core::entry::Schedule;
use pricing_core::model::Page;
use pricing_core::ports::{ActiveInstances, InstanceStore, ScheduledInstance};

use crate::fixtures::{Run, header, instance};
use crate::{check_pages, page_request};

pub async fn active_instances_contract<S: InstanceStore + ActiveInstances>(store: &S) {
    let run = Run::new("active");
    let mut expected = Vec::new();
    for (i, active) in [true, false, true, true, false].into_iter().enumerate() {
        let key = run.key("p", &format!("i{i}"));
        let mut inst = instance(&key, "I");
        inst.active = active;
        let mut h = header(0, serde_json::json!({}));
        if i == 0 {
            h.schedule = Some(Schedule::IntervalSeconds(900));
        }
        store.create_instance(&inst, &h).await.expect("create");
        if active {
            expected.push(key);
        }
    }
    let listed = ours(store, &run).await;
    let keys: Vec<_> = listed.iter().map(|s| s.instance.key()).collect();
    assert_eq!(keys, expected, "exactly the active instances, in key order");
    assert_eq!(listed[0].schedule, Some(Schedule::IntervalSeconds(900)));
    assert_eq!(
        listed[1].schedule, None,
        "no schedule entry: the default applies"
    );

    // Flags change through put_instance.
    let mut off = instance(&expected[0], "I");
    off.active = false;
    store.put_instance(&off).await.expect("put");
    let mut on = instance(&run.key("p", "i1"), "I");
    on.active = true;
    store.put_instance(&on).await.expect("put");
    let keys: Vec<_> = ours(store, &run)
        .await
        .iter()
        .map(|s| s.instance.key())
        .collect();
    assert_eq!(
        keys,
        vec![run.key("p", "i1"), run.key("p", "i2"), run.key("p", "i3")]
    );
}

/// The active instances of this run's project, through every page.
async fn ours<S: ActiveInstances>(store: &S, run: &Run) -> Vec<ScheduledInstance> {
    check_pages(2, |cursor| async move {
        let page = store
            .active_instances(&page_request(cursor, 2))
            .await
            .expect("list");
        assert!(page.skipped.is_empty(), "{:?}", page.skipped);
        Page {
            items: page.items,
            next: page.next,
        }
    })
    .await
    .into_iter()
    .filter(|s| s.instance.project_id == run.project_id("p"))
    .collect()
}
