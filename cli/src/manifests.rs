//! Reading manifests for `check`: files, directories (recursively with -R) and stdin.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Manifest file endings read from a directory.
const ENDINGS: [&str; 3] = ["yaml", "yml", "json"];

/// The files under `path` (itself when a file), sorted; directories only one level deep
/// unless `recursive`.
fn files_of(path: &Path, recursive: bool, out: &mut Vec<PathBuf>) -> Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    if meta.is_file() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading directory {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            if recursive {
                files_of(&entry, recursive, out)?;
            }
        } else if entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ENDINGS.contains(&e))
        {
            out.push(entry);
        }
    }
    Ok(())
}

/// Every document of `paths` (`-`: standard input), each with the name of its source.
pub fn read(paths: &[String], recursive: bool) -> Result<Vec<(String, Vec<Value>)>> {
    let mut out = Vec::new();
    for p in paths {
        if p == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading standard input")?;
            out.push(("-".to_owned(), parse(&text).context("standard input")?));
            continue;
        }
        let mut files = Vec::new();
        files_of(Path::new(p), recursive, &mut files)?;
        if files.is_empty() {
            bail!("{p}: no manifest (*.yaml, *.yml, *.json) found");
        }
        for f in files {
            let text =
                std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
            let docs = parse(&text).with_context(|| format!("{}", f.display()))?;
            out.push((f.display().to_string(), docs));
        }
    }
    Ok(out)
}

/// The documents of a YAML (or JSON) text; empty documents dropped.
pub fn parse(text: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).context("parsing YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}
