//! `dlq`: list, inspect and redrive the stack's dead-letter queues (docs/operations.md).
//! The queue URLs are the stack outputs (or the functions' variables); each lane's
//! dead-letter queue is found from its source queue's redrive policy.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use dlq::{DeadLetter, Error, Lane};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(about = "List, inspect and redrive the dead-letter queues of the pricing stack")]
struct Cli {
    /// Source queue of the process lane (stack output ProcessQueueUrl).
    #[arg(long, env = "PROCESS_QUEUE_URL", global = true)]
    process_queue_url: Option<String>,
    /// Source queue of the recalc lane (stack output RecalcQueueUrl).
    #[arg(long, env = "RECALC_QUEUE_URL", global = true)]
    recalc_queue_url: Option<String>,
    /// Source queue of the webhook lane (stack output WebhookQueueUrl).
    #[arg(long, env = "WEBHOOK_QUEUE_URL", global = true)]
    webhook_queue_url: Option<String>,
    /// Another SQS endpoint (an emulator).
    #[arg(long, env = "AWS_ENDPOINT_URL", global = true)]
    endpoint_url: Option<String>,
    /// Seconds a pass keeps the messages it received hidden.
    #[arg(long, default_value_t = 30, global = true)]
    visibility: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LaneName {
    Process,
    Recalc,
    Webhook,
}

#[derive(Subcommand)]
enum Command {
    /// Messages of the dead-letter queues (left in place).
    List {
        /// Only these lanes (default: every lane whose queue URL is given).
        #[arg(long, value_enum)]
        lane: Vec<LaneName>,
        /// At most this many messages per lane.
        #[arg(long, default_value_t = 100)]
        max: usize,
    },
    /// One message in full, as JSON (left in place).
    Show {
        message_id: String,
        #[arg(long, value_enum)]
        lane: Vec<LaneName>,
        /// Messages to look through per lane.
        #[arg(long, default_value_t = 1000)]
        max: usize,
    },
    /// Send messages back to their source queue, then delete them from the dead-letter queue.
    Redrive {
        #[arg(long, value_enum)]
        lane: LaneName,
        /// Only these messages (default: all, up to --max).
        #[arg(long = "id")]
        ids: Vec<String>,
        #[arg(long, default_value_t = 1000)]
        max: usize,
        /// Show what would be redriven; send and delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl Cli {
    fn url(&self, lane: LaneName) -> Option<(&'static str, &str)> {
        match lane {
            LaneName::Process => self.process_queue_url.as_deref().map(|u| ("process", u)),
            LaneName::Recalc => self.recalc_queue_url.as_deref().map(|u| ("recalc", u)),
            LaneName::Webhook => self.webhook_queue_url.as_deref().map(|u| ("webhook", u)),
        }
    }

    /// The chosen lanes, or every lane with a URL; a chosen lane without one is an error.
    async fn lanes(
        &self,
        client: &aws_sdk_sqs::Client,
        chosen: &[LaneName],
    ) -> Result<Vec<Lane>, Error> {
        let all = [LaneName::Process, LaneName::Recalc, LaneName::Webhook];
        let mut out = Vec::new();
        for lane in all
            .into_iter()
            .filter(|l| chosen.is_empty() || chosen.contains(l))
        {
            match self.url(lane) {
                Some((name, url)) => out.push(Lane::resolve(client, name, url).await?),
                None if chosen.is_empty() => {}
                None => {
                    let var = ["PROCESS", "RECALC", "WEBHOOK"]
                        [all.iter().position(|l| *l == lane).unwrap_or(0)];
                    return Err(Error(format!(
                        "no queue URL for that lane: set {var}_QUEUE_URL"
                    )));
                }
            }
        }
        if out.is_empty() {
            return Err(Error(
                "no queue URL: set PROCESS_QUEUE_URL, RECALC_QUEUE_URL or WEBHOOK_QUEUE_URL (stack outputs)".to_owned(),
            ));
        }
        Ok(out)
    }
}

fn summary(m: &DeadLetter) -> String {
    let sent = m
        .sent_at()
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| "?".to_owned());
    let group = m
        .group_id()
        .map(|g| format!("  group={g}"))
        .unwrap_or_default();
    let body: String = m.body.chars().take(160).collect();
    let more = if m.body.chars().count() > 160 {
        "..."
    } else {
        ""
    };
    format!(
        "{}  receives={}  sent={sent}{group}  {body}{more}",
        m.message_id,
        m.receive_count()
    )
}

fn detail(lane: &Lane, m: &DeadLetter) -> Value {
    let attributes: serde_json::Map<String, Value> = m
        .message_attributes
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!({"dataType": v.data_type(), "stringValue": v.string_value()}),
            )
        })
        .collect();
    json!({
        "lane": lane.name,
        "deadLetterQueueUrl": lane.dead_letter_url,
        "sourceQueueUrl": lane.source_url,
        "messageId": m.message_id,
        "body": serde_json::from_str::<Value>(&m.body).unwrap_or_else(|_| Value::String(m.body.clone())),
        "attributes": m.attributes,
        "messageAttributes": attributes,
    })
}

async fn run(cli: Cli) -> Result<bool, Error> {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(url) = &cli.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    let client = aws_sdk_sqs::Client::new(&loader.load().await);
    let visibility = Duration::from_secs(cli.visibility);
    match &cli.command {
        Command::List { lane, max } => {
            for lane in cli.lanes(&client, lane).await? {
                let messages = dlq::list(&client, &lane, *max, visibility).await?;
                println!(
                    "== {}: {} message(s) listed, dead-letter queue {}",
                    lane.name,
                    messages.len(),
                    lane.dead_letter_url
                );
                for m in &messages {
                    println!("{}", summary(m));
                }
            }
            Ok(true)
        }
        Command::Show {
            message_id,
            lane,
            max,
        } => {
            for lane in cli.lanes(&client, lane).await? {
                let messages = dlq::list(&client, &lane, *max, visibility).await?;
                if let Some(m) = messages.iter().find(|m| &m.message_id == message_id) {
                    let text = serde_json::to_string_pretty(&detail(&lane, m))
                        .map_err(|e| Error(format!("printing: {e}")))?;
                    println!("{text}");
                    return Ok(true);
                }
            }
            eprintln!("no message {message_id} in the dead-letter queues looked at");
            Ok(false)
        }
        Command::Redrive {
            lane,
            ids,
            max,
            dry_run,
        } => {
            let lane = cli.lanes(&client, &[*lane]).await?.remove(0);
            let only: Option<BTreeSet<String>> =
                (!ids.is_empty()).then(|| ids.iter().cloned().collect());
            let report =
                dlq::redrive(&client, &lane, only.as_ref(), *max, visibility, *dry_run).await?;
            for id in &report.redriven {
                println!("redriven {id}");
            }
            for (id, error) in &report.sent_not_deleted {
                println!("sent, not deleted (still in the dead-letter queue) {id}: {error}");
            }
            for (id, error) in &report.failed {
                println!("failed (still in the dead-letter queue) {id}: {error}");
            }
            if *dry_run {
                for id in &report.left {
                    println!("would redrive {id}");
                }
            }
            if let Some(only) = &only {
                let found: BTreeSet<&String> = report
                    .redriven
                    .iter()
                    .chain(report.sent_not_deleted.iter().map(|(id, _)| id))
                    .chain(report.failed.iter().map(|(id, _)| id))
                    .chain(report.left.iter().filter(|_| *dry_run))
                    .collect();
                for id in only.iter().filter(|id| !found.contains(id)) {
                    println!("not found {id}");
                }
            }
            println!(
                "{}: {} redriven, {} sent but not deleted, {} failed{}",
                lane.name,
                report.redriven.len(),
                report.sent_not_deleted.len(),
                report.failed.len(),
                if *dry_run { " (dry run)" } else { "" }
            );
            Ok(report.failed.is_empty() && report.sent_not_deleted.is_empty())
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("dlq: {e}");
            ExitCode::FAILURE
        }
    }
}
