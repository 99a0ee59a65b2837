//! management-api (HTTP): projects, instances, details, keys and every other route.

use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let router = aws.api_router().await?;
    lambda_http::run(router).await
}
