//! Tuning the kernel templates (Romou §4, SmartMem's and DNNFusion's
//! genetic tuning): the parameters a template declares (`space`), the
//! points Romou's criteria prune against a device profile (`prune`), the
//! searches over what is left (`search`) and the database of what they
//! found (`database`). `kernel.lower` reads a [`Tuning`]; `ircc tune`
//! fills it a trial at a time.

pub mod database;
pub mod harness;
pub mod prune;
pub mod search;
pub mod space;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use ircc_core::OpId;
use ircc_dialects::kernel::{DeviceProfile, Target};

use prune::KernelFacts;
use space::{Criterion, MatmulConfig, TuningSpec};

/// What `kernel.lower` tunes with: the configuration per kernel
/// signature it takes, and the tunable kernels it lowered.
#[derive(Debug, Default)]
pub struct Tuning {
    pub table: BTreeMap<String, MatmulConfig>,
    /// Where the table came from, for errors: a database's path.
    pub source: String,
    pub seen: BTreeMap<String, Tunable>,
}

/// A tunable kernel signature `kernel.lower` met.
#[derive(Clone, Debug)]
pub struct Tunable {
    pub facts: KernelFacts,
    /// The configuration the target's heuristic gives it.
    pub default: MatmulConfig,
    /// Products of the module with this signature.
    pub instances: usize,
    /// The names of their kernels (a product split along K has two).
    pub kernels: Vec<String>,
    /// The host op (a fused group or a lone op) of each product, in the
    /// module as it was before lowering: what `ircc tune` times a
    /// signature on, alone ([`harness::harness`]).
    pub ops: Vec<OpId>,
}

/// A [`Tuning`] `ircc tune` shares with the `kernel.lower` it runs.
pub type SharedTuning = Rc<RefCell<Tuning>>;

/// One signature's space: its size, the valid points, the points pruning
/// keeps, and how many valid points each criterion excludes (`None` where
/// the profile lacks its figure).
pub struct SpaceReport {
    pub full: usize,
    pub valid: Vec<MatmulConfig>,
    pub kept: Vec<MatmulConfig>,
    pub by_criterion: Vec<(&'static str, Option<usize>)>,
}

/// The space of the kernel `facts` describes on `device`.
pub fn space_of(
    spec: &TuningSpec,
    facts: &KernelFacts,
    device: &DeviceProfile,
    target: &Target,
) -> SpaceReport {
    let points = spec.matmul_tiled.points();
    let full = points.len();
    let valid: Vec<MatmulConfig> = points
        .into_iter()
        .filter(|c| c.invalid(&facts.shape, target).is_none())
        .collect();
    let applying: Vec<&Criterion> = spec
        .criterion
        .iter()
        .filter(|c| c.applies(device))
        .collect();
    // `fill` wants the largest grid among the points the other criteria
    // keep (all valid points where they keep none), so that it never
    // leaves a product without a point to search.
    let others: Vec<&MatmulConfig> = valid
        .iter()
        .filter(|c| {
            !applying
                .iter()
                .any(|x| **x != Criterion::Fill && x.excludes(c, facts, device))
        })
        .collect();
    let from = if others.is_empty() {
        valid.iter().collect()
    } else {
        others
    };
    let facts = &KernelFacts {
        most_workgroups: from
            .iter()
            .map(|c| c.grid(&facts.shape).iter().product::<i64>())
            .max()
            .unwrap_or(0),
        ..*facts
    };
    let kept = valid
        .iter()
        .filter(|c| !applying.iter().any(|x| x.excludes(c, facts, device)))
        .copied()
        .collect();
    let by_criterion = spec
        .criterion
        .iter()
        .map(|x| {
            let n = x.applies(device).then(|| {
                valid
                    .iter()
                    .filter(|c| x.excludes(c, facts, device))
                    .count()
            });
            (x.name(), n)
        })
        .collect();
    SpaceReport {
        full,
        valid,
        kept,
        by_criterion,
    }
}
