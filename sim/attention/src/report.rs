//! Simulating one schedule on one workload.

use serde::{Deserialize, Serialize};

use crate::accelerator::Accelerator;
use crate::energy::{Accesses, EnergyBreakdown};
use crate::engine;
use crate::error::SimError;
use crate::plan;
use crate::schedule::Schedule;
use crate::search::{self, SearchOptions};
use crate::tiling::{self, Tiling};
use crate::workload::Workload;

/// Outcome of simulating a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Workload name.
    pub workload: String,
    /// The schedule simulated.
    pub schedule: Schedule,
    /// The tiling simulated (the search's best when searched).
    pub tiling: Tiling,
    /// Cycles until the last task finished.
    pub cycles: u64,
    /// Bytes read from DRAM.
    pub dram_read_bytes: u64,
    /// Bytes written to DRAM.
    pub dram_write_bytes: u64,
    /// Access and operation counts.
    pub accesses: Accesses,
    /// Fraction of the MAC units' cycles spent computing.
    pub mac_utilization: f64,
    /// Energy per component.
    pub energy: EnergyBreakdown,
    /// Tilings the search simulated (1 for a given tiling).
    pub tilings_simulated: u32,
}

/// Simulates `schedule` on `workload`, searching for its best tiling with
/// `opts`.
pub fn simulate(
    acc: &Accelerator,
    workload: &Workload,
    schedule: Schedule,
    opts: &SearchOptions,
) -> Result<Report, SimError> {
    acc.validate()?;
    workload.validate()?;
    let dims = tiling::space(acc, schedule, workload.seq);
    let mut cost = |point: &[u32]| match plan::build(acc, workload, schedule, tiling::at(point)) {
        Ok(plan) => Ok(Some(engine::run(&plan.graph)?.makespan)),
        Err(SimError::InvalidTiling(_)) => Ok(None),
        Err(e) => Err(e),
    };
    let found =
        search::search(&dims, opts, &mut cost)?.ok_or_else(|| SimError::NoFeasibleTiling {
            schedule: schedule.name(),
            workload: workload.name.clone(),
        })?;
    let mut report = run(acc, workload, schedule, tiling::at(&found.point))?;
    report.tilings_simulated = found.simulated;
    Ok(report)
}

/// Simulates `schedule` on `workload` with a given tiling.
pub fn simulate_tiling(
    acc: &Accelerator,
    workload: &Workload,
    schedule: Schedule,
    tiling: Tiling,
) -> Result<Report, SimError> {
    acc.validate()?;
    workload.validate()?;
    run(acc, workload, schedule, tiling)
}

fn run(
    acc: &Accelerator,
    workload: &Workload,
    schedule: Schedule,
    tiling: Tiling,
) -> Result<Report, SimError> {
    let plan = plan::build(acc, workload, schedule, tiling)?;
    let timeline = engine::run(&plan.graph)?;
    let a = plan.accesses;
    let mac_capacity = timeline.makespan * u64::from(acc.cores);
    Ok(Report {
        workload: workload.name.clone(),
        schedule,
        tiling,
        cycles: timeline.makespan,
        dram_read_bytes: a.dram_reads * u64::from(acc.elem_bytes),
        dram_write_bytes: a.dram_writes * u64::from(acc.elem_bytes),
        accesses: a,
        mac_utilization: if mac_capacity == 0 {
            0.0
        } else {
            timeline.mac_busy as f64 / mac_capacity as f64
        },
        energy: acc.energy.breakdown(&a),
        tilings_simulated: 1,
    })
}
