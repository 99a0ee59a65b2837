//! AWS adapters of the ports: DynamoDB (single table, see docs/aws.md), SQS, and the
//! signing keys in Secrets Manager. Clients are built once per process and shared.
//!
//! - [`DynamoStore`]: ProjectStore, InstanceStore, EntryLog, StateStore, EventStore (with
//!   the event outbox), Backlog, PriceStore, PriceMatchStore, ActiveInstances,
//!   SubscriptionStore and DeliveryStore on the stack's one table (`pk`/`sk`, sparse index
//!   `gsi1`).
//! - [`SqsQueue`]: WorkQueue on one SQS queue (FIFO when the URL ends in `.fifo`),
//!   [`Queues`]: Enqueue to the queue of each message's lane, and [`parse_message`] for
//!   Lambda handlers that get the messages as SQS events.
//! - [`secrets`]: the service's keys: the signing keys (read by the functions that sign,
//!   written by the key-rotator only) and their public halves (read by the management API).
//! - [`emulator`]: SDK configuration for tests against a local AWS emulator (moto).

pub mod config;
pub mod dynamo;
pub mod emulator;
mod error;
pub mod secrets;
pub mod sqs;

pub use config::{Config, ConfigError};
pub use dynamo::{DynamoStore, TTL_ATTRIBUTE};
pub use sqs::{Queues, SqsQueue, parse_message};

/// The shared SDK configuration: region and credentials from the environment (the Lambda
/// role in AWS), with an optional endpoint override (a local emulator).
pub async fn sdk_config(endpoint_url: Option<&str>) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
    }
    loader.load().await
}
