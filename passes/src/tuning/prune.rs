//! Romou's hardware-aware pruning (Table 1, §4.2): each criterion reads a
//! point's use of the hardware against the device profile and excludes
//! the points that over- or under-use it.

use ircc_dialects::kernel::DeviceProfile;

use super::space::{Criterion, MatmulConfig, ProductShape};

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
            // Romou prunes loads narrower than the width of the best cache
            // bandwidth. Where an invocation loads its own operands, the
            // template reads buffers a word at a time in its inner loop,
            // and those points go. Where the tiles are shared, the buffer
            // reads (four words a load where the operand lies so) only
            // fill them, once a step, and the inner loop reads workgroup
            // memory, which is no cache: the search decides between its
            // vec4 and word reads.
            Criterion::AccessWidth => !c.local_memory && d.load_width.is_some_and(|w| w > 1),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tuning::space::TuningSpec;
    use ircc_dialects::kernel::Target;

    fn config(wx: i64, wy: i64, rows: i64, cols: i64, splits: i64, local: bool) -> MatmulConfig {
        MatmulConfig {
            workgroup_x: wx,
            workgroup_y: wy,
            rows,
            cols,
            k_step: 16,
            splits,
            local_memory: local,
        }
    }

    const SHAPE: ProductShape = ProductShape {
        m: 196,
        n: 384,
        k: 768,
        batches: 1,
    };

    #[test]
    fn each_criterion_reads_its_figure() {
        let d = DeviceProfile::named("adreno640").unwrap();
        let facts = KernelFacts::new(SHAPE, true);
        let excludes = |x: Criterion, c: MatmulConfig| x.excludes(&c, &facts, &d);
        // A workgroup of 32 is smaller than Adreno's 64-wide wave.
        assert!(excludes(Criterion::Warp, config(8, 4, 4, 4, 1, true)));
        assert!(!excludes(Criterion::Warp, config(16, 4, 4, 4, 1, true)));
        // Adreno's L1 serves textures only: direct loads from buffers go.
        assert!(excludes(Criterion::Buffer, config(16, 16, 4, 4, 1, false)));
        assert!(!excludes(Criterion::Buffer, config(16, 16, 4, 4, 1, true)));
        // Adreno's cache is best read four wide: an invocation loading its
        // own operands a word at a time goes, a tile read from workgroup
        // memory a word at a time stays; where a word is as fast, nothing
        // goes.
        let width = |d: &DeviceProfile, c| Criterion::AccessWidth.excludes(&c, &facts, d);
        assert!(width(&d, config(16, 16, 4, 4, 1, false)));
        assert!(!width(&d, config(16, 16, 2, 1, 1, true)));
        let tiny = KernelFacts::new(
            ProductShape {
                m: 2,
                n: 3,
                k: 64,
                batches: 1,
            },
            true,
        );
        assert!(Criterion::AccessWidth.excludes(&config(4, 4, 1, 1, 1, false), &tiny, &d));
        let mut narrow = d.clone();
        narrow.load_width = Some(1);
        assert!(!width(&narrow, config(16, 16, 4, 4, 1, false)));
        // 1 KiB of L1: a 64 x 64 tile's step of 16 is 8 KiB.
        assert!(excludes(Criterion::L1Data, config(16, 16, 4, 4, 1, true)));
        // Mali's 24,576 registers a core give 256 invocations 96 each: 8 x 8
        // results with their operands and prefetched words (112) do not fit.
        let mali = DeviceProfile::named("mali_g76").unwrap();
        let registers = Criterion::Registers { overhead: 16 };
        assert!(registers.excludes(&config(16, 16, 8, 8, 1, true), &facts, &mali));
        assert!(!registers.excludes(&config(16, 16, 2, 2, 1, true), &facts, &mali));
        // A split of 768 / 16 = 48 steps in 16 leaves 3 a split.
        let short = Criterion::ShortSplit { min_steps: 4 };
        assert!(excludes(short.clone(), config(16, 16, 4, 4, 16, true)));
        assert!(!excludes(short, config(16, 16, 4, 4, 8, true)));
        // A 13 x 10 product in 64 x 64 tiles is mostly padding.
        let small = ProductShape {
            m: 13,
            n: 10,
            k: 37,
            batches: 1,
        };
        let small = KernelFacts::new(small, true);
        assert!(Criterion::Padding.excludes(&config(16, 16, 4, 4, 1, true), &small, &d));
        assert!(!Criterion::Padding.excludes(&config(4, 4, 2, 2, 1, true), &small, &d));
    }

    #[test]
    fn a_criterion_without_its_figure_prunes_nothing() {
        let d = DeviceProfile::named("lavapipe_probed").unwrap();
        assert!(d.registers_per_unit.is_none() && d.alus_per_unit.is_none());
        assert!(!Criterion::Registers { overhead: 16 }.applies(&d));
        assert!(!Criterion::LocalMemory { alpha: 3 }.applies(&d));
        let spec = TuningSpec::builtin();
        let facts = KernelFacts::new(SHAPE, true);
        let report = crate::tuning::space_of(&spec, &facts, &d, Target::webgpu());
        let skipped: Vec<&str> = report
            .by_criterion
            .iter()
            .filter(|(_, n)| n.is_none())
            .map(|(name, _)| *name)
            .collect();
        assert_eq!(skipped, ["registers", "local_memory"]);
        assert!(!report.kept.is_empty() && report.kept.len() < report.valid.len());
    }

    #[test]
    fn points_that_cannot_build_are_invalid() {
        let t = Target::webgpu();
        let invalid = |c: MatmulConfig| c.invalid(&SHAPE, t);
        assert_eq!(invalid(config(16, 16, 4, 4, 1, true)), None);
        // 768 / 16 = 48 steps: 5 splits do not divide them.
        assert!(
            invalid(config(16, 16, 4, 4, 5, true))
                .unwrap()
                .contains("splits")
        );
        // More invocations, register words or splits than the target allows.
        assert!(
            invalid(config(32, 16, 1, 1, 1, true))
                .unwrap()
                .contains("invocations")
        );
        assert!(
            invalid(config(1, 1, 256, 1, 1, false))
                .unwrap()
                .contains("rows = 256")
        );
        assert!(
            invalid(config(1, 1, 16, 16, 1, false))
                .unwrap()
                .contains("register tile")
        );
        assert!(
            invalid(config(4, 4, 1, 1, 4096, false))
                .unwrap()
                .contains("splits = 4096")
        );
        assert!(invalid(config(4, 4, 0, 1, 1, false)).is_some());
    }
}
