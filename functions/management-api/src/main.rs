//! management-api (HTTP): projects, instances, details, keys and every other route.

use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let router = aws.api_router().await?;
    pricing_lambda::initialized("management-api", started);
    lambda_http::run(router).await
}
