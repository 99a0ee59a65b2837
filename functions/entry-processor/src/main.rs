//! entry-processor (SQS FIFO, group = instance): applies each woken instance's log tail;
//! failed messages are reported as partial batch failures. Each invocation ends with its
//! metrics as EMF lines on stdout.

use lambda_runtime::Error;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let started = pricing_lambda::init_tracing();
    pricing_lambda::handlers::serve_work("entry-processor", started).await
}
