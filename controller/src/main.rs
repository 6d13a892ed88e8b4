//! `karmada-quota-controller`: see the library for how it works.

use clap::Parser;
use karmada_quota_controller::Args;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    karmada_quota_shell::init_logging(&args.log)?;
    let client = karmada_quota_shell::client(&args.client).await?;
    karmada_quota_controller::run(args, client).await?;
    Ok(())
}
