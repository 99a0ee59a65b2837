//! entries-api (HTTP): submit entries and read the log. API Gateway routes the entries
//! paths here; the router is the shared one, so any other path answers as it would anywhere.

use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let router = aws.api_router().await?;
    lambda_http::run(router).await
}
