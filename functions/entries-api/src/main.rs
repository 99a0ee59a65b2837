//! entries-api (HTTP): submit entries and read the log. API Gateway routes the entries
//! paths here; the router is the shared one, so any other path answers as it would anywhere.
//! It reads the signing keys (it signs the entries it takes) and never writes them.

use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let router = aws.api_router().await?;
    pricing_lambda::initialized("entries-api", started);
    pricing_lambda::http::run(router).await
}
