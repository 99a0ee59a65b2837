//! management-api (HTTP): projects, instances, details, keys and every other route but the
//! entry log (entries-api) and `POST /simulations` (simulations-api). It holds only the public
//! keys (it publishes the key set and signs nothing).

use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let router = aws.management_router().await?;
    pricing_lambda::initialized("management-api", started);
    pricing_lambda::http::run(router).await
}
