//! The dead-letter tool on the AWS emulator, on queues provisioned from template.yaml:
//! messages really dead-lettered by the redrive policies (received past maxReceiveCount),
//! then listed, shown, redriven (all, by id, dry run) and a failed send that keeps the
//! message. Library calls and the `dlq` binary.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::MessageSystemAttributeName;
use dlq::Lane;

const VISIBILITY: Duration = Duration::from_secs(30);

fn client() -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "emulator"))
        .endpoint_url(pricing_emulator::endpoint())
        .build();
    Client::from_conf(config)
}

/// Sends `messages` (body, FIFO group) to the lane's source queue and receives them with
/// visibility 0 until the redrive policy has moved every one to the dead-letter queue.
async fn dead_letter(client: &Client, lane: &Lane, messages: &[(&str, &str)]) {
    for (n, (body, group)) in messages.iter().enumerate() {
        let mut send = client
            .send_message()
            .queue_url(&lane.source_url)
            .message_body(*body);
        if lane.fifo {
            send = send
                .message_group_id(*group)
                .message_deduplication_id(format!("test-{n}"));
        }
        send.send().await.unwrap();
    }
    for _ in 0..200 {
        if lane.approximate_count(client).await.unwrap() == messages.len() as u64 {
            return;
        }
        client
            .receive_message()
            .queue_url(&lane.source_url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    panic!(
        "{}: the messages did not reach the dead-letter queue",
        lane.name
    );
}

/// Everything the source queue holds now: (body, group), in receive order; deleted.
async fn drain(client: &Client, url: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    loop {
        let got = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .wait_time_seconds(0)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await
            .unwrap();
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            let group = m
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned();
            out.push((m.body().unwrap_or_default().to_owned(), group));
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
}

/// Runs the `dlq` binary against the emulator with the stack's variables: (success,
/// stdout; with stderr after it on failure).
fn cli(env: &HashMap<String, String>, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dlq"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_ENDPOINT_URL", pricing_emulator::endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .envs(env.iter().filter(|(k, _)| k.ends_with("_QUEUE_URL")))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        (true, stdout)
    } else {
        (false, format!("{stdout}{stderr}"))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lists_shows_and_redrives_dead_letters() {
    let env = pricing_emulator::provision("dlq");
    let client = client();
    let process = Lane::resolve(&client, "process", &env["PROCESS_QUEUE_URL"])
        .await
        .unwrap();
    let recalc = Lane::resolve(&client, "recalc", &env["RECALC_QUEUE_URL"])
        .await
        .unwrap();
    assert!(
        process.fifo
            && process
                .dead_letter_url
                .ends_with("-ProcessDeadLetterQueue.fifo")
    );
    assert!(!recalc.fifo && recalc.dead_letter_url.ends_with("-RecalcDeadLetterQueue"));

    let a1 = r#"{"kind":"processInstance","key":"p/a","n":1}"#;
    let a2 = r#"{"kind":"processInstance","key":"p/a","n":2}"#;
    let b1 = r#"{"kind":"processInstance","key":"p/b"}"#;
    dead_letter(&client, &process, &[(a1, "p/a"), (a2, "p/a"), (b1, "p/b")]).await;
    let r1 = r#"{"kind":"recalculate","key":"p/a","calculationId":"c1","trigger":"request"}"#;
    let r2 = r#"{"kind":"recalculate","key":"p/b","calculationId":"c2","trigger":"schedule"}"#;
    dead_letter(&client, &recalc, &[(r1, ""), (r2, "")]).await;
    assert!(drain(&client, &process.source_url).await.is_empty());

    // Listing leaves the messages in place: a second listing sees the same ones.
    let listed = dlq::list(&client, &recalc, 100, VISIBILITY).await.unwrap();
    let bodies: BTreeSet<&str> = listed.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, BTreeSet::from([r1, r2]));
    assert!(
        listed
            .iter()
            .all(|m| m.receive_count() >= 1 && m.sent_at().is_some())
    );
    let again = dlq::list(&client, &recalc, 100, VISIBILITY).await.unwrap();
    assert_eq!(again.len(), 2);
    let id_of = |body: &str| {
        listed
            .iter()
            .find(|m| m.body == body)
            .unwrap()
            .message_id
            .clone()
    };
    let (id1, id2) = (id_of(r1), id_of(r2));
    // FIFO: SQS hands out a group's messages only while none of it is in flight, so a
    // listing shows at least the first of every group, with its group (moto: all of them).
    let listed = dlq::list(&client, &process, 100, VISIBILITY).await.unwrap();
    let groups: BTreeSet<&str> = listed.iter().filter_map(|m| m.group_id()).collect();
    assert_eq!(groups, BTreeSet::from(["p/a", "p/b"]));
    let dead_order: Vec<String> = listed.iter().map(|m| m.body.clone()).collect();

    // The binary: list and show.
    let (ok, out) = cli(&env, &["list"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("== process:")
            && out.contains("== recalc:")
            && out.contains("== webhook: 0 message(s)"),
        "{out}"
    );
    assert!(
        out.contains(&id1) && out.contains(&id2) && out.contains("group=p/a"),
        "{out}"
    );
    let (ok, out) = cli(&env, &["show", "--lane", "recalc", &id1]);
    assert!(ok, "{out}");
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["messageId"], id1.as_str());
    assert_eq!(shown["body"]["calculationId"], "c1");
    assert_eq!(shown["sourceQueueUrl"], env["RECALC_QUEUE_URL"].as_str());
    let (ok, out) = cli(&env, &["show", "no-such-id"]);
    assert!(!ok && out.contains("no message no-such-id"), "{out}");

    // A dry run changes nothing.
    let report = dlq::redrive(&client, &recalc, None, 100, VISIBILITY, true)
        .await
        .unwrap();
    assert_eq!((report.redriven.len(), report.left.len()), (0, 2));
    assert!(drain(&client, &recalc.source_url).await.is_empty());

    // One message by id: it goes back to its source queue and leaves the dead-letter queue.
    let only = BTreeSet::from([id1.clone()]);
    let report = dlq::redrive(&client, &recalc, Some(&only), 100, VISIBILITY, false)
        .await
        .unwrap();
    assert_eq!(report.redriven, std::slice::from_ref(&id1));
    assert!(report.failed.is_empty() && report.sent_not_deleted.is_empty());
    assert_eq!(
        drain(&client, &recalc.source_url).await,
        [(r1.to_owned(), None)]
    );
    let left = dlq::list(&client, &recalc, 100, VISIBILITY).await.unwrap();
    let left: Vec<&str> = left.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(left, [id2.as_str()]);

    // The binary redrives the other one.
    let (ok, out) = cli(&env, &["redrive", "--lane", "recalc", "--id", &id2]);
    assert!(ok && out.contains(&format!("redriven {id2}")), "{out}");
    assert_eq!(
        drain(&client, &recalc.source_url).await,
        [(r2.to_owned(), None)]
    );
    assert_eq!(recalc.approximate_count(&client).await.unwrap(), 0);

    // The whole FIFO lane: every message back in its group, in the order of the
    // dead-letter queue within the group (the order SQS moved them in; here a2 may come
    // before a1: wake-ups carry no data, their order does not matter).
    let report = dlq::redrive(&client, &process, None, 100, VISIBILITY, false)
        .await
        .unwrap();
    assert_eq!(report.redriven.len(), 3, "{report:?}");
    let back = drain(&client, &process.source_url).await;
    let of_group = |g: &str| -> Vec<&str> {
        back.iter()
            .filter(|(_, group)| group.as_deref() == Some(g))
            .map(|(b, _)| b.as_str())
            .collect()
    };
    assert_eq!(dead_order.len(), 3, "{dead_order:?}");
    let dead_of_group = |g: &str| -> Vec<&str> {
        dead_order
            .iter()
            .map(String::as_str)
            .filter(|b| b.contains(&format!("\"key\":\"{g}\"")))
            .collect()
    };
    assert_eq!(of_group("p/a"), dead_of_group("p/a"));
    assert_eq!(
        BTreeSet::from_iter(of_group("p/a")),
        BTreeSet::from([a1, a2])
    );
    assert_eq!(of_group("p/b"), [b1]);
    assert!(
        dlq::list(&client, &process, 100, VISIBILITY)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_send_keeps_the_message_in_the_dead_letter_queue() {
    let env = pricing_emulator::provision("dlq-fail");
    let client = client();
    let lane = Lane::resolve(&client, "webhook", &env["WEBHOOK_QUEUE_URL"])
        .await
        .unwrap();
    let body = r#"{"kind":"deliver","webhookId":"w1"}"#;
    dead_letter(&client, &lane, &[(body, "")]).await;

    // The source queue is gone: the send fails, nothing is deleted.
    let broken = Lane {
        source_url: format!(
            "{}/123456789012/no-such-queue",
            pricing_emulator::endpoint()
        ),
        ..lane.clone()
    };
    let report = dlq::redrive(&client, &broken, None, 100, VISIBILITY, false)
        .await
        .unwrap();
    assert!(report.redriven.is_empty(), "{report:?}");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(report.failed[0].1.contains("SendMessage"), "{report:?}");
    let still = dlq::list(&client, &lane, 100, VISIBILITY).await.unwrap();
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].body, body);

    // With the real source queue it goes through.
    let report = dlq::redrive(&client, &lane, None, 100, VISIBILITY, false)
        .await
        .unwrap();
    assert_eq!(report.redriven.len(), 1);
    assert_eq!(
        drain(&client, &lane.source_url).await,
        [(body.to_owned(), None)]
    );
}
