//! `kubectl-karmada_quota` (run as `kubectl karmada-quota`): parse flags, run, exit with
//! the command's code.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use karmada_quota_cli::{Failure, args::Args, exit, run};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::BAD_INPUT
            } else {
                exit::OK
            });
        }
    };
    match run(args).await {
        Ok((text, code)) => {
            let _ = std::io::stdout().write_all(text.as_bytes());
            ExitCode::from(code)
        }
        Err(Failure { code, error }) => {
            eprintln!("error: {error:#}");
            ExitCode::from(code)
        }
    }
}
