//! `kq-fuzz <target>`: one of karmada-quota-fuzz's targets under AFL++ (persistent mode).
//!
//! Run by hack/fuzz.sh as `afl-fuzz … -- kq-fuzz <target>`. Outside afl-fuzz it reads
//! one input from standard input and runs it once (how a crash file is replayed:
//! `kq-fuzz quantity < crash`).

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = karmada_quota_fuzz::target(&name) else {
        let names: Vec<_> = karmada_quota_fuzz::TARGETS.iter().map(|t| t.name).collect();
        eprintln!("usage: kq-fuzz <target>; targets: {}", names.join(" "));
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        (target.run)(data);
    });
}
