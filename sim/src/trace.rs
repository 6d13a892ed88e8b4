//! The trace of a run: one line per thing that happened, stamped with simulated
//! milliseconds. Byte-identical for one seed; its hash is the run's fingerprint.

/// The lines of one run.
#[derive(Debug, Default)]
pub struct Trace {
    lines: Vec<String>,
}

impl Trace {
    /// Record `line` at `ms`.
    pub fn push(&mut self, ms: u64, line: String) {
        self.lines.push(format!("{ms:>8} {line}"));
    }

    /// Every line.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// FNV-1a over every line: equal for byte-identical traces.
    pub fn hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for line in &self.lines {
            for b in line.bytes().chain(std::iter::once(b'\n')) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        h
    }
}
