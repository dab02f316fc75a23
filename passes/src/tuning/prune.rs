//! Romou's hardware-aware pruning (Table 1, §4.2): each criterion reads a
//! point's use of the hardware against the device profile and excludes
//! the points that over- or under-use it.

use ircc_dialects::kernel::DeviceProfile;
use serde::Deserialize;

use super::space::{MatmulConfig, ProductShape};

/// A row of Romou's Table 1 (or one of ircc's own two), as
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

/// What a criterion knows of the kernel besides its configuration.
#[derive(Clone, Copy, Debug)]
pub struct KernelFacts {
    pub shape: ProductShape,
    /// Whether the kernel reads an operand from a buffer (not a texture).
    pub reads_buffers: bool,
    /// The largest grid any valid point of the space gives the product
    /// (`space_of` finds it; unbounded until then).
    pub most_workgroups: i64,
}

impl KernelFacts {
    pub fn new(shape: ProductShape, reads_buffers: bool) -> KernelFacts {
        KernelFacts {
            shape,
            reads_buffers,
            most_workgroups: i64::MAX,
        }
    }
}

impl Criterion {
    pub fn name(&self) -> &'static str {
        match self {
            Criterion::L1Data => "l1_data",
            Criterion::Registers { .. } => "registers",
            Criterion::Buffer => "buffer",
            Criterion::LocalMemory { .. } => "local_memory",
            Criterion::Warp => "warp",
            Criterion::AccessWidth => "access_width",
            Criterion::Fill => "fill",
            Criterion::Padding => "padding",
            Criterion::ShortSplit { .. } => "short_split",
        }
    }

    /// Whether the profile has the figure this criterion reads.
    pub fn applies(&self, d: &DeviceProfile) -> bool {
        match self {
            Criterion::L1Data => d.l1_bytes.is_some(),
            Criterion::Registers { .. } => d.registers_per_unit.is_some(),
            Criterion::LocalMemory { .. } => d.alus_per_unit.is_some(),
            Criterion::AccessWidth => d.load_width.is_some(),
            Criterion::Buffer
            | Criterion::Warp
            | Criterion::Fill
            | Criterion::Padding
            | Criterion::ShortSplit { .. } => true,
        }
    }

    /// Whether this criterion excludes `c` on device `d`.
    pub fn excludes(&self, c: &MatmulConfig, k: &KernelFacts, d: &DeviceProfile) -> bool {
        let invocations = c.invocations();
        match self {
            Criterion::L1Data => {
                // Each invocation's loads of one K step, times the
                // workgroup: the shared tiles once, or every invocation's
                // own rows and columns.
                let words = if c.local_memory {
                    (c.tile_m() + c.tile_n()) * c.k_step
                } else {
                    (c.rows + c.cols) * c.k_step * invocations
                };
                d.l1_bytes.is_some_and(|l1| words as u64 * 4 > l1)
            }
            Criterion::Registers { overhead } => {
                let (a, b) = c.loads_per_invocation();
                let per_invocation = c.rows * c.cols + c.rows + c.cols + a + b + overhead;
                d.registers_per_unit
                    .is_some_and(|r| (per_invocation * invocations) as u64 > u64::from(r))
            }
            Criterion::Buffer => !c.local_memory && k.reads_buffers && !d.l1_serves_buffers,
            Criterion::LocalMemory { alpha } => {
                c.local_memory
                    && d.alus_per_unit
                        .is_some_and(|alus| invocations > alpha * i64::from(alus))
            }
            Criterion::Warp => invocations < i64::from(d.subgroup_size),
            // B's columns, and A's rows where they come from workgroup
            // memory, are read `width` at a time only in multiples of it.
            Criterion::AccessWidth => d.load_width.is_some_and(|w| {
                let w = i64::from(w);
                (c.cols % w != 0 && k.shape.n >= w)
                    || (c.local_memory && c.rows % w != 0 && k.shape.m >= w)
            }),
            Criterion::Fill => {
                let workgroups: i64 = c.grid(&k.shape).iter().product();
                workgroups < i64::from(d.compute_units).min(k.most_workgroups)
            }
            Criterion::Padding => c.tile_m() > 2 * k.shape.m || c.tile_n() > 2 * k.shape.n,
            Criterion::ShortSplit { min_steps } => {
                c.splits > 1 && c.steps(k.shape.k) / c.splits < *min_steps
            }
        }
    }
}

/// The criteria of `criteria` that exclude `c` (empty: `c` is kept).
pub fn excluded_by<'a>(
    criteria: &'a [Criterion],
    c: &MatmulConfig,
    k: &KernelFacts,
    d: &DeviceProfile,
) -> Vec<&'a Criterion> {
    criteria.iter().filter(|x| x.excludes(c, k, d)).collect()
}
