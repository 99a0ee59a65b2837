//! Test support: the stack's resources on the emulator, and clients for them.

#![allow(dead_code)]

use std::collections::HashMap;

use aws_config::SdkConfig;
use pricing_aws::{Config, DynamoStore, Queues, SqsQueue};

/// The stack's data resources, freshly provisioned on the emulator from template.yaml.
pub struct Stack {
    pub config: Config,
    pub sdk: SdkConfig,
}

impl Stack {
    /// Provisions a stack of its own (unique names) and builds SDK clients for it.
    pub async fn new(name: &str) -> Stack {
        let name = name.to_owned();
        let (endpoint, env): (&'static str, HashMap<String, String>) =
            tokio::task::spawn_blocking(move || {
                let endpoint = pricing_emulator::endpoint();
                (endpoint, pricing_emulator::provision(&name))
            })
            .await
            .expect("provision the stack on the emulator");
        let config = Config::from_map(&env).expect("the provisioned environment is complete");
        let sdk = pricing_aws::emulator::emulator_sdk_config(endpoint).await;
        Stack { config, sdk }
    }

    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.sdk)
    }

    pub fn store(&self) -> DynamoStore {
        DynamoStore::new(self.dynamodb(), &self.config.table_name)
    }

    /// The FIFO queue of the entry processor.
    pub fn process_queue(&self) -> SqsQueue {
        SqsQueue::new(
            aws_sdk_sqs::Client::new(&self.sdk),
            &self.config.process_queue_url,
        )
    }

    /// A standard queue.
    pub fn recalc_queue(&self) -> SqsQueue {
        SqsQueue::new(
            aws_sdk_sqs::Client::new(&self.sdk),
            &self.config.recalc_queue_url,
        )
    }

    /// The standard queue of the webhooks lane.
    pub fn webhook_queue(&self) -> SqsQueue {
        SqsQueue::new(
            aws_sdk_sqs::Client::new(&self.sdk),
            &self.config.webhook_queue_url,
        )
    }

    /// The producers' router over the stack's queues.
    pub fn queues(&self) -> Queues {
        Queues::new(&aws_sdk_sqs::Client::new(&self.sdk), &self.config)
    }

    pub fn secrets(&self) -> aws_sdk_secretsmanager::Client {
        aws_sdk_secretsmanager::Client::new(&self.sdk)
    }
}
