//! Every seed under `fuzz/corpus/<target>/` through its target: the fuzz targets' laws hold on the
//! inputs the fuzzer starts from, in an ordinary `cargo test`.

use std::path::Path;

use karmada_quota_fuzz::TARGETS;

fn replay(dir: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut replayed = 0;
    for target in TARGETS {
        let Ok(entries) = std::fs::read_dir(root.join(target.name)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            let input = std::fs::read(&path).expect("corpus file");
            eprintln!("{} {}", target.name, path.display());
            (target.run)(&input);
            replayed += 1;
        }
    }
    replayed
}

#[test]
fn every_target_keeps_its_laws_on_its_seed_corpus() {
    for target in TARGETS {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(target.name);
        let seeds = std::fs::read_dir(&dir).map(Iterator::count).unwrap_or(0);
        assert!(
            seeds > 0,
            "no seed for {} in {}",
            target.name,
            dir.display()
        );
    }
    assert!(replay("corpus") >= TARGETS.len());
}
