//! `cargo run -p karmada-quota-fuzz --example replay -- <target> FILE...`: runs inputs
//! through a target without AFL++ (a finding's file, or a hand-written input).

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_default();
    let Some(target) = karmada_quota_fuzz::target(&name) else {
        eprintln!("usage: replay <target> FILE...");
        std::process::exit(2);
    };
    for path in args {
        let input = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        (target.run)(&input);
        println!("{path}: ok");
    }
}
