//! `karmada-quota-sim`: run the simulation for one seed or a range of seeds.
//!
//! ```text
//! cargo run -p karmada-quota-sim -- --seed 12345            # one run, its verdict
//! cargo run -p karmada-quota-sim -- --seed 12345 --trace    # and its whole trace
//! cargo run -p karmada-quota-sim -- --seeds 0..1000         # many runs, the failing ones
//! ```
//!
//! A failing seed prints its violations, the last lines of its trace and the command that
//! replays it; the exit code is 1 when any seed failed.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use karmada_quota_sim::{Config, Faults, Outcome, run};

/// Deterministic simulation of the reservation batch store.
#[derive(Parser, Debug)]
#[command(name = "karmada-quota-sim")]
struct Args {
    /// Run this seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run these seeds (`A..B`, B excluded).
    #[arg(long)]
    seeds: Option<String>,
    /// Workload steps per run.
    #[arg(long, default_value_t = 60)]
    steps: u32,
    /// Webhook replicas (1 to 4).
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// Namespaces, one quota each.
    #[arg(long, default_value_t = 2)]
    quotas: usize,
    /// Fault kinds (comma-separated, `all`, `none`); default: each seed picks.
    #[arg(long)]
    faults: Option<String>,
    /// A fitting request denied once fails the liveness check (default: retried).
    #[arg(long)]
    strict_liveness: bool,
    /// The longest wait before a failed watch lists again, ms (production: 0.5 s doubling
    /// to 10 s).
    #[arg(long, default_value_t = 1_000)]
    backoff_max_ms: u64,
    /// Skip the liveness phase (safety alone).
    #[arg(long)]
    no_liveness: bool,
    /// Once the faults stopped, a hand deletes the newest batch and every webhook
    /// restarts; the liveness phase then checks the store healed (docs/reservations.md
    /// R20).
    #[arg(long)]
    hand_deletes_newest: bool,
    /// A standby controller that takes the lease when the leader crashes or is deposed
    /// (`on`, `off`); default: each seed picks.
    #[arg(long, value_parser = ["on", "off"])]
    standby: Option<String>,
    /// The last namespace's quota is created while the run goes on (`on`, `off`; with two
    /// quotas or more); default: each seed picks, one run in four.
    #[arg(long, value_parser = ["on", "off"])]
    late_quota: Option<String>,
    /// With a late quota, clients use its namespace from its creation on, before every
    /// replica holds it (`on`, `off`); default: each seed picks, one late-quota run in two.
    #[arg(long, value_parser = ["on", "off"])]
    early_use: Option<String>,
    /// The webhook replicas' --batch-linger in ms (0: the webhook's default).
    #[arg(long, default_value_t = 0)]
    linger_ms: u64,
    /// Print the whole trace of each run.
    #[arg(long)]
    trace: bool,
    /// Stop at the first failing seed.
    #[arg(long)]
    stop: bool,
}

fn seeds(args: &Args) -> Result<std::ops::Range<u64>, String> {
    if let Some(s) = args.seed {
        return Ok(s..s + 1);
    }
    let spec = args.seeds.as_deref().unwrap_or("0..100");
    let (a, b) = spec
        .split_once("..")
        .ok_or_else(|| format!("--seeds {spec:?}: expected A..B"))?;
    let parse = |x: &str| {
        x.trim()
            .parse::<u64>()
            .map_err(|e| format!("--seeds {spec:?}: {e}"))
    };
    Ok(parse(a)?..parse(b)?)
}

/// The command that replays `outcome`.
fn replay(outcome: &Outcome, faults_given: bool) -> String {
    let c = &outcome.config;
    let features = karmada_quota_sim::REVERTS;
    let mut cmd = String::from("cargo run -p karmada-quota-sim");
    if !features.is_empty() {
        cmd.push_str(&format!(" --features {}", features.join(",")));
    }
    cmd.push_str(&format!(
        " -- --seed {} --steps {} --replicas {} --quotas {}",
        c.seed, c.steps, c.replicas, c.quotas
    ));
    if faults_given {
        cmd.push_str(&format!(" --faults {}", outcome.faults.describe()));
    }
    if c.strict_liveness {
        cmd.push_str(" --strict-liveness");
    }
    if !c.liveness {
        cmd.push_str(" --no-liveness");
    }
    if c.backoff_max_ms != 1_000 {
        cmd.push_str(&format!(" --backoff-max-ms {}", c.backoff_max_ms));
    }
    if c.hand_deletes_newest {
        cmd.push_str(" --hand-deletes-newest");
    }
    if let Some(on) = c.standby {
        cmd.push_str(if on {
            " --standby on"
        } else {
            " --standby off"
        });
    }
    if let Some(on) = c.late_quota {
        cmd.push_str(if on {
            " --late-quota on"
        } else {
            " --late-quota off"
        });
    }
    if c.early_use == Some(true) {
        cmd.push_str(" --early-use on");
    }
    if c.linger_ms > 0 {
        cmd.push_str(&format!(" --linger-ms {}", c.linger_ms));
    }
    cmd
}

fn report(outcome: &Outcome, faults_given: bool) {
    println!(
        "seed {} FAILED (faults {}):",
        outcome.config.seed,
        outcome.faults.describe()
    );
    for v in &outcome.violations {
        println!("  {v}");
    }
    println!("  last {} lines of the trace:", karmada_quota_sim::TAIL);
    for line in outcome.tail(karmada_quota_sim::TAIL) {
        println!("    {line}");
    }
    println!("  replay: {}", replay(outcome, faults_given));
}

fn main() -> ExitCode {
    let args = Args::parse();
    let range = match seeds(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let faults = match args.faults.as_deref().map(Faults::parse).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let (mut failed, mut admissions, mut runs) = (0_u64, 0_u64, 0_u64);
    for seed in range {
        let config = Config {
            steps: args.steps,
            replicas: args
                .replicas
                .clamp(1, karmada_quota_sim::clock::MAX_REPLICAS),
            quotas: args.quotas.max(1),
            faults,
            strict_liveness: args.strict_liveness,
            liveness: !args.no_liveness,
            backoff_max_ms: args.backoff_max_ms,
            hand_deletes_newest: args.hand_deletes_newest,
            standby: args.standby.as_deref().map(|s| s == "on"),
            late_quota: args.late_quota.as_deref().map(|s| s == "on"),
            early_use: args.early_use.as_deref().map(|s| s == "on"),
            linger_ms: args.linger_ms,
            ..Config::new(seed)
        };
        let outcome = run(&config);
        runs += 1;
        admissions += outcome.admissions;
        if args.trace {
            for line in &outcome.trace {
                println!("{line}");
            }
        }
        if outcome.failed() {
            failed += 1;
            report(&outcome, faults.is_some());
            if args.stop {
                break;
            }
        } else if runs == 1 || args.trace {
            println!(
                "seed {seed} passed: {} admissions, {} trace lines, {} ms simulated, trace {:016x}",
                outcome.admissions,
                outcome.trace.len(),
                outcome.sim_ms,
                outcome.trace_hash
            );
        }
    }
    println!(
        "{runs} runs, {failed} failed, {admissions} admissions, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
