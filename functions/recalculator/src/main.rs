//! recalculator (SQS): runs the pricing engine for an instance and stores the prices with
//! their `prices.updated` events; idempotent per calculation id.

use lambda_runtime::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    pricing_lambda::handlers::serve_work("recalculator", started).await
}
