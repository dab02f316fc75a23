//! The tuning database: per device, the best parameters found for each
//! kernel signature, as a TOML file a person can read and a diff can show.
//! The file is written in one canonical form (entries sorted by key,
//! times to a thousandth of a microsecond), so the same trials give the
//! same bytes; one written for another device, format or template version
//! is refused.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::space::MatmulConfig;

/// The version of the file's layout.
pub const FORMAT: u32 = 1;

/// The versions of the tunable templates: a database measured on another
/// version of a template is stale, since its times describe other code.
/// Bump it where a template's code changes for the same parameters.
pub const TEMPLATES: &str = "matmul_tiled/1";

/// The best point found for one kernel signature, and what it was measured at.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    pub config: MatmulConfig,
    /// The median time of one kernel with this configuration, in microseconds.
    pub median_us: f64,
    /// The same with the untuned default.
    pub default_us: f64,
    /// Configurations measured for this signature, over all runs merged.
    pub trials: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TuningDb {
    pub device: String,
    pub entries: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    format: u32,
    device: String,
    templates: String,
    #[serde(default)]
    kernel: Vec<FileEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    key: String,
    median_us: f64,
    default_us: f64,
    trials: u64,
    workgroup_x: i64,
    workgroup_y: i64,
    rows: i64,
    cols: i64,
    k_step: i64,
    splits: i64,
    local_memory: bool,
}

impl TuningDb {
    pub fn new(device: &str) -> TuningDb {
        TuningDb {
            device: device.to_string(),
            entries: BTreeMap::new(),
        }
    }

    /// Reads a database for `device`; `path` names it in errors.
    pub fn parse(text: &str, path: &str, device: &str) -> Result<TuningDb, String> {
        let bad = |what: String| format!("tuning database {path}: {what}");
        let file: File = toml::from_str(text).map_err(|e| bad(format!("not readable: {e}")))?;
        if file.format != FORMAT {
            return Err(bad(format!(
                "format {} is not this ircc's format {FORMAT}; tune again",
                file.format
            )));
        }
        if file.templates != TEMPLATES {
            return Err(bad(format!(
                "stale: measured on templates '{}', this ircc has '{TEMPLATES}'; tune again",
                file.templates
            )));
        }
        if file.device != device {
            return Err(bad(format!(
                "measured on device '{}', not '{device}'",
                file.device
            )));
        }
        let mut entries = BTreeMap::new();
        for e in file.kernel {
            let times_ok = [e.median_us, e.default_us]
                .iter()
                .all(|t| t.is_finite() && *t >= 0.0);
            if !times_ok {
                return Err(bad(format!(
                    "kernel '{}': times must be finite and not negative",
                    e.key
                )));
            }
            let entry = Entry {
                config: MatmulConfig {
                    workgroup_x: e.workgroup_x,
                    workgroup_y: e.workgroup_y,
                    rows: e.rows,
                    cols: e.cols,
                    k_step: e.k_step,
                    splits: e.splits,
                    local_memory: e.local_memory,
                },
                median_us: e.median_us,
                default_us: e.default_us,
                trials: e.trials,
            };
            if entries.insert(e.key.clone(), entry).is_some() {
                return Err(bad(format!("kernel '{}' is listed twice", e.key)));
            }
        }
        Ok(TuningDb {
            device: device.to_string(),
            entries,
        })
    }

    /// Reads the database at `path` for `device`.
    pub fn read(path: &str, device: &str) -> Result<TuningDb, String> {
        let text = ircc_core::files::read_spec_file(path)
            .map_err(|e| format!("the tuning database {path}: {e}"))?;
        TuningDb::parse(&text, path, device)
    }

    /// The canonical text of the database.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "# ircc tuning database: the fastest parameters `ircc tune` measured for\n\
             # each kernel signature on this device (times in microseconds).\n\
             format = {FORMAT}\ndevice = {}\ntemplates = {}\n",
            quoted(&self.device),
            quoted(TEMPLATES)
        );
        for (key, e) in &self.entries {
            let c = &e.config;
            out.push_str(&format!(
                "\n[[kernel]]\nkey = {}\nmedian_us = {:.3}\ndefault_us = {:.3}\ntrials = {}\n\
                 workgroup_x = {}\nworkgroup_y = {}\nrows = {}\ncols = {}\nk_step = {}\nsplits = {}\nlocal_memory = {}\n",
                quoted(key),
                e.median_us,
                e.default_us,
                e.trials,
                c.workgroup_x,
                c.workgroup_y,
                c.rows,
                c.cols,
                c.k_step,
                c.splits,
                c.local_memory
            ));
        }
        out
    }

    /// Adds `other`'s entries: per signature the faster configuration
    /// (ties to the smaller configuration, so merging is order-free), with
    /// the default's time measured in the same run, and the trials of both.
    pub fn merge(&mut self, other: &TuningDb) {
        for (key, theirs) in &other.entries {
            let merged = match self.entries.get(key) {
                None => *theirs,
                Some(mine) => {
                    let first = (mine.median_us, mine.config) <= (theirs.median_us, theirs.config);
                    let best = if first { mine } else { theirs };
                    Entry {
                        trials: mine.trials.saturating_add(theirs.trials),
                        ..*best
                    }
                }
            };
            self.entries.insert(key.clone(), merged);
        }
    }

    /// The configuration per signature, as `kernel.lower` reads it.
    pub fn table(&self) -> BTreeMap<String, MatmulConfig> {
        self.entries
            .iter()
            .map(|(k, e)| (k.clone(), e.config))
            .collect()
    }
}

/// `s` as a TOML string.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(x: i64, us: f64) -> Entry {
        Entry {
            config: MatmulConfig {
                workgroup_x: x,
                workgroup_y: 8,
                rows: 4,
                cols: 4,
                k_step: 16,
                splits: 1,
                local_memory: true,
            },
            median_us: us,
            default_us: 20.0,
            trials: 3,
        }
    }

    fn db(entries: &[(&str, Entry)]) -> TuningDb {
        let mut d = TuningDb::new("lavapipe");
        for (k, e) in entries {
            d.entries.insert(k.to_string(), *e);
        }
        d
    }

    #[test]
    fn the_text_reads_back_and_merging_is_order_free() {
        let a = db(&[
            ("matmul 8x8x8", entry(16, 10.0)),
            ("conv \"x\" \u{7f}\\ 4x4x4", entry(8, 3.5)),
        ]);
        let b = db(&[("matmul 8x8x8", entry(32, 9.0))]);
        let text = a.to_text();
        assert_eq!(TuningDb::parse(&text, "a", "lavapipe").unwrap(), a);
        let (mut ab, mut ba) = (a.clone(), b.clone());
        ab.merge(&b);
        ba.merge(&a);
        assert_eq!(ab.to_text(), ba.to_text());
        let merged = &ab.entries["matmul 8x8x8"];
        assert_eq!((merged.config.workgroup_x, merged.trials), (32, 6));
    }

    #[test]
    fn corrupt_and_stale_databases_are_refused() {
        let good = db(&[("matmul 8x8x8", entry(16, 10.0))]).to_text();
        let cases = [
            (good.replace("format = 1", "format = 7"), "format 7"),
            (good.replace(TEMPLATES, "matmul_tiled/0"), "stale"),
            (
                good.replace("median_us = 10.000", "median_us = nan"),
                "finite",
            ),
            (good.replace("rows = 4", "rows = \"four\""), "not readable"),
            (
                good.replace("rows = 4", "rows = 4\ncolour = 1"),
                "not readable",
            ),
            (
                format!(
                    "{good}\n[[kernel]]{}",
                    good.split_once("\n[[kernel]]").unwrap().1
                ),
                "twice",
            ),
        ];
        for (text, expected) in cases {
            let e = TuningDb::parse(&text, "t.toml", "lavapipe").unwrap_err();
            assert!(e.contains(expected) && e.contains("t.toml"), "{e}");
        }
        let e = TuningDb::parse(&good, "t.toml", "nvidia_vulkan").unwrap_err();
        assert!(e.contains("measured on device 'lavapipe'"), "{e}");
    }
}
