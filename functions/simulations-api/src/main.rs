//! simulations-api (HTTP): `POST /simulations`, a market scenario simulated (the market
//! simulator, CPU-bound, on a function of its own so that the management-api does not link
//! it). It holds only the public keys (it signs nothing).

use pricing_lambda::wiring::Aws;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let started = pricing_lambda::init_tracing();
    let aws = Aws::from_env().await?;
    let router = aws.simulations_router().await?;
    pricing_lambda::initialized("simulations-api", started);
    pricing_lambda::http::run(router).await
}
