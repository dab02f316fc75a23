//! The matmul template's parameters, its search space (`spec/tuning.toml`)
//! and the constraints a point must meet to build and run at all.

use ircc_dialects::kernel::Target;
use serde::{Deserialize, Serialize};

/// One point of the matmul template's space: how its kernel tiles a
/// product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatmulConfig {
    pub workgroup_x: i64,
    pub workgroup_y: i64,
    /// Result rows each invocation computes.
    pub rows: i64,
    /// Result columns each invocation computes.
    pub cols: i64,
    pub k_step: i64,
    pub splits: i64,
    pub local_memory: bool,
}

/// The product a configuration tiles: `batches` products of `m` x `k`
/// by `k` x `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProductShape {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub batches: i64,
}

impl MatmulConfig {
    /// Result rows of a workgroup's tile.
    pub fn tile_m(&self) -> i64 {
        self.workgroup_y * self.rows
    }

    /// Result columns of a workgroup's tile.
    pub fn tile_n(&self) -> i64 {
        self.workgroup_x * self.cols
    }

    pub fn invocations(&self) -> i64 {
        self.workgroup_x * self.workgroup_y
    }

    /// K's steps over the whole product.
    pub fn steps(&self, k: i64) -> i64 {
        (k + self.k_step - 1) / self.k_step
    }

    /// The grid: workgroups along x (columns), y (rows), z (batch, then
    /// the split of K).
    pub fn grid(&self, p: &ProductShape) -> [i64; 3] {
        [
            (p.n + self.tile_n() - 1) / self.tile_n(),
            (p.m + self.tile_m() - 1) / self.tile_m(),
            p.batches * self.splits,
        ]
    }

    /// Whether A's tile is kept transposed, so an invocation reads its
    /// rows four at a time; B's tile is read by columns four at a time
    /// where `vec4_cols`.
    pub fn vec4_rows(&self) -> bool {
        self.local_memory && self.rows % 4 == 0
    }

    pub fn vec4_cols(&self) -> bool {
        self.local_memory && self.cols % 4 == 0
    }

    /// Words of workgroup memory in which the epilogue stages one row of
    /// register tiles per result written as texels.
    pub fn texel_staging_words(&self) -> i64 {
        self.workgroup_y * self.tile_n()
    }

    /// Whether the kernel can write `results` results as texels of four
    /// neighbouring columns: unsplit, its tiles a whole number of texels
    /// wide, and their staging fitting beside the operand tiles and the
    /// `other` words its prologue takes.
    pub fn writes_texels(&self, results: usize, other: i64, t: &Target) -> bool {
        let words = self.workgroup_words() + results as i64 * self.texel_staging_words() + other;
        self.splits == 1 && self.tile_n() % 4 == 0 && words * 4 <= t.max_workgroup_storage_bytes
    }

    /// Whether `other` words of workgroup memory fit beside the operand
    /// tiles.
    pub fn fits_beside(&self, other: i64, t: &Target) -> bool {
        (self.workgroup_words() + other) * 4 <= t.max_workgroup_storage_bytes
    }

    /// Words of workgroup memory, at most: A's tile (transposed where
    /// read by vec4) and B's, their rows padded where the operand is
    /// staged across them (by four words where read by vec4, else one).
    pub fn workgroup_words(&self) -> i64 {
        if !self.local_memory {
            return 0;
        }
        let a = if self.vec4_rows() {
            self.k_step * (self.tile_m() + 4)
        } else {
            self.tile_m() * (self.k_step + 1)
        };
        let b_pad = if self.vec4_cols() { 4 } else { 1 };
        a + self.k_step * (self.tile_n() + b_pad)
    }

    /// Words of A's and B's tiles each invocation loads per step into
    /// workgroup memory (and holds as the next step's prefetch).
    pub fn loads_per_invocation(&self) -> (i64, i64) {
        if !self.local_memory {
            return (0, 0);
        }
        (
            self.tile_m() * self.k_step / self.invocations(),
            self.k_step * self.tile_n() / self.invocations(),
        )
    }

    /// Why the template cannot build or run this point for `p` under the
    /// target's limits, if it cannot.
    pub fn invalid(&self, p: &ProductShape, t: &Target) -> Option<String> {
        let bounded = [
            ("workgroup_x", self.workgroup_x, t.max_workgroup_invocations),
            ("workgroup_y", self.workgroup_y, t.max_workgroup_invocations),
            ("rows", self.rows, t.matmul_tuned_max_register_words),
            ("cols", self.cols, t.matmul_tuned_max_register_words),
            ("k_step", self.k_step, t.matmul_tuned_max_k_step),
            ("splits", self.splits, t.matmul_tuned_max_splits),
        ];
        if let Some((name, x, most)) = bounded.iter().find(|(_, x, most)| !(1..=*most).contains(x))
        {
            return Some(format!("{name} = {x} is not within 1 and {most}"));
        }
        if self.rows * self.cols > t.matmul_tuned_max_register_words {
            return Some(format!(
                "a register tile of {} x {} exceeds the target's {} words",
                self.rows, self.cols, t.matmul_tuned_max_register_words
            ));
        }
        if self.invocations() > t.max_workgroup_invocations {
            return Some(format!(
                "{} invocations exceed the target's {}",
                self.invocations(),
                t.max_workgroup_invocations
            ));
        }
        if self.workgroup_words() * 4 > t.max_workgroup_storage_bytes {
            return Some(format!(
                "{} bytes of workgroup memory exceed the target's {}",
                self.workgroup_words() * 4,
                t.max_workgroup_storage_bytes
            ));
        }
        let tiles_whole = (self.tile_m() * self.k_step) % self.invocations() == 0
            && (self.k_step * self.tile_n()) % self.invocations() == 0;
        if self.local_memory && !tiles_whole {
            return Some("the invocations do not share the operand tiles evenly".into());
        }
        let steps = self.steps(p.k);
        if steps % self.splits != 0 {
            return Some(format!(
                "{} splits do not divide K's {steps} steps",
                self.splits
            ));
        }
        let grid = self.grid(p);
        if grid.iter().any(|&g| g > t.max_workgroups_per_dimension) {
            return Some(format!("the grid {grid:?} exceeds the target's limit"));
        }
        None
    }
}

/// The values each parameter of the matmul template takes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatmulSpace {
    pub workgroup_x: Vec<i64>,
    pub workgroup_y: Vec<i64>,
    pub rows: Vec<i64>,
    pub cols: Vec<i64>,
    pub k_step: Vec<i64>,
    pub splits: Vec<i64>,
    pub local_memory: Vec<bool>,
}

/// The parameters of a point as integers (`local_memory` as 0 or 1), in
/// the order of [`MatmulSpace::values`]: what the genetic search crosses
/// and mutates.
pub const PARAMETERS: usize = 7;

impl MatmulSpace {
    /// Each parameter's values, as integers.
    pub fn values(&self) -> [Vec<i64>; PARAMETERS] {
        [
            self.workgroup_x.clone(),
            self.workgroup_y.clone(),
            self.rows.clone(),
            self.cols.clone(),
            self.k_step.clone(),
            self.splits.clone(),
            self.local_memory.iter().map(|&b| i64::from(b)).collect(),
        ]
    }

    /// Every point, in a fixed order.
    pub fn points(&self) -> Vec<MatmulConfig> {
        let mut out = vec![[0i64; PARAMETERS]];
        for (i, values) in self.values().iter().enumerate() {
            out = out
                .into_iter()
                .flat_map(|p| {
                    values.iter().map(move |&v| {
                        let mut q = p;
                        q[i] = v;
                        q
                    })
                })
                .collect();
        }
        out.into_iter().map(from_parameters).collect()
    }
}

pub fn parameters(c: &MatmulConfig) -> [i64; PARAMETERS] {
    [
        c.workgroup_x,
        c.workgroup_y,
        c.rows,
        c.cols,
        c.k_step,
        c.splits,
        i64::from(c.local_memory),
    ]
}

pub fn from_parameters(p: [i64; PARAMETERS]) -> MatmulConfig {
    MatmulConfig {
        workgroup_x: p[0],
        workgroup_y: p[1],
        rows: p[2],
        cols: p[3],
        k_step: p[4],
        splits: p[5],
        local_memory: p[6] != 0,
    }
}

/// The genetic search's settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSettings {
    pub population: usize,
    pub tournament: usize,
    pub mutation: f64,
    pub min_gain: f64,
}

/// The most points a tuning spec's space may have (the built-in one has
/// 28,800): each signature lists them all.
pub const MAX_POINTS: usize = 1 << 20;

/// `spec/tuning.toml`: the spaces, the pruning criteria, the search.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TuningSpec {
    pub matmul_tiled: MatmulSpace,
    pub criterion: Vec<Criterion>,
    pub search: SearchSettings,
}

impl TuningSpec {
    pub fn parse(text: &str) -> Result<TuningSpec, String> {
        let spec: TuningSpec =
            toml::from_str(text).map_err(|e| format!("invalid tuning spec: {e}"))?;
        let values = spec.matmul_tiled.values();
        if values.iter().any(Vec::is_empty) {
            return Err("invalid tuning spec: a parameter of matmul_tiled has no values".into());
        }
        // Every point is listed when a signature's space is built.
        let points = values
            .iter()
            .try_fold(1usize, |n, v| n.checked_mul(v.len()))
            .filter(|&n| n <= MAX_POINTS);
        if points.is_none() {
            return Err(format!(
                "invalid tuning spec: matmul_tiled's space has more than {MAX_POINTS} points"
            ));
        }
        if spec.search.population < 2 || spec.search.tournament < 1 {
            return Err("invalid tuning spec: the search needs a population of at least two and tournaments of at least one".into());
        }
        if !(0.0..=1.0).contains(&spec.search.mutation)
            || !(0.0..1.0).contains(&spec.search.min_gain)
        {
            return Err("invalid tuning spec: the mutation probability and the least gain must be fractions".into());
        }
        Ok(spec)
    }

    /// The embedded `spec/tuning.toml`.
    pub fn builtin() -> TuningSpec {
        TuningSpec::parse(include_str!("../../../spec/tuning.toml"))
            .expect("the embedded tuning spec parses")
    }
}

/// A row of Romou's Table 1 (or one of ircc's own three), as
/// `spec/tuning.toml` declares it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Criterion {
    L1Data,
    Registers { overhead: i64 },
    Buffer,
    LocalMemory { alpha: i64 },
    Warp,
    AccessWidth,
    Fill,
    Padding,
    ShortSplit { min_steps: i64 },
}
