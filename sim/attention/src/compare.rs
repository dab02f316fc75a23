//! "Paper vs ours" for Table 2.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::accelerator::Accelerator;
use crate::error::SimError;
use crate::paper::{TABLE2, TABLE2_GEOMEAN};
use crate::report::{Report, simulate};
use crate::schedule::Schedule;
use crate::search::SearchOptions;
use crate::workload::Workload;

/// MAS-Attention's speed-up over each baseline (baseline cycles / MAS
/// cycles).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Speedups {
    /// Over Layer-Wise.
    pub layer_wise: f64,
    /// Over Soft-Pipe.
    pub soft_pipe: f64,
    /// Over FLAT.
    pub flat: f64,
    /// Over TileFlow.
    pub tileflow: f64,
}

impl Speedups {
    /// The speed-up over `schedule` (1 over MAS-Attention itself).
    pub fn get(&self, schedule: Schedule) -> f64 {
        match schedule {
            Schedule::LayerWise => self.layer_wise,
            Schedule::SoftPipe => self.soft_pipe,
            Schedule::Flat => self.flat,
            Schedule::TileFlow => self.tileflow,
            Schedule::Mas => 1.0,
        }
    }

    fn from_fn(f: impl Fn(Schedule) -> f64) -> Self {
        Self {
            layer_wise: f(Schedule::LayerWise),
            soft_pipe: f(Schedule::SoftPipe),
            flat: f(Schedule::Flat),
            tileflow: f(Schedule::TileFlow),
        }
    }
}

/// One workload of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table2Row {
    /// Workload name.
    pub workload: String,
    /// Our simulation of each schedule, in [`Schedule::ALL`] order.
    pub reports: Vec<Report>,
    /// Our speed-ups.
    pub ours: Speedups,
    /// The paper's speed-ups.
    pub paper: Speedups,
    /// The paper's MAS-Attention cycles.
    pub paper_mas_cycles: f64,
}

impl Table2Row {
    /// Our cycles for `schedule`.
    pub fn cycles(&self, schedule: Schedule) -> u64 {
        cycles_of(&self.reports, schedule)
    }
}

fn cycles_of(reports: &[Report], schedule: Schedule) -> u64 {
    reports
        .iter()
        .find(|r| r.schedule == schedule)
        .map_or(0, |r| r.cycles)
}

/// Table 2 reproduced: per workload and as geometric means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table2 {
    /// The 12 workloads, in Table 1's order.
    pub rows: Vec<Table2Row>,
    /// Geometric means of our speed-ups.
    pub ours_geomean: Speedups,
    /// The paper's geometric means.
    pub paper_geomean: Speedups,
}

/// Relative deviation of ours from the paper's (0.1 is 10% above).
pub fn deviation(ours: f64, paper: f64) -> f64 {
    ours / paper - 1.0
}

/// Simulates all five schedules on the 12 workloads of Table 1 and sets our
/// speed-ups beside the paper's.
pub fn table2(acc: &Accelerator, opts: &SearchOptions) -> Result<Table2, SimError> {
    let mut rows = Vec::with_capacity(TABLE2.len());
    for (workload, paper) in Workload::table1().iter().zip(&TABLE2) {
        let reports = Schedule::ALL
            .iter()
            .map(|&s| simulate(acc, workload, s, opts))
            .collect::<Result<Vec<_>, _>>()?;
        let mas = cycles_of(&reports, Schedule::Mas) as f64;
        rows.push(Table2Row {
            workload: workload.name.clone(),
            ours: Speedups::from_fn(|s| cycles_of(&reports, s) as f64 / mas),
            paper: paper.speedup,
            paper_mas_cycles: paper.mega_cycles[4] * 1e6,
            reports,
        });
    }
    let geomean = |s: Schedule| {
        let logs: f64 = rows.iter().map(|r| r.ours.get(s).ln()).sum();
        (logs / rows.len() as f64).exp()
    };
    Ok(Table2 {
        ours_geomean: Speedups::from_fn(geomean),
        paper_geomean: TABLE2_GEOMEAN,
        rows,
    })
}

const NAME_WIDTH: usize = 27;

/// "paper ours deviation" for one figure.
fn cell(paper: f64, ours: f64) -> String {
    format!(
        " | {paper:>5.2} {ours:>5.2} {:>+6.1}%",
        100.0 * deviation(ours, paper)
    )
}

impl fmt::Display for Table2 {
    /// A plain-text table: per baseline the paper's speed-up, ours and our
    /// deviation; MAS-Attention's own cycles in millions likewise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lines = Vec::with_capacity(self.rows.len() + 3);
        let mut titles = format!(
            "{:NAME_WIDTH$} | {:^19}",
            "MAS-Attention speed-up over", "MAS Mcycles"
        );
        for s in Schedule::BASELINES {
            titles += &format!(" | {:^19}", s.title());
        }
        lines.push(titles);
        let columns = format!(" | {:>5} {:>5} {:>7}", "paper", "ours", "dev");
        lines.push(format!("{:NAME_WIDTH$}", "") + &columns.repeat(5));
        for row in &self.rows {
            let mas = row.cycles(Schedule::Mas) as f64;
            let mut line = format!("{:NAME_WIDTH$}", row.workload)
                + &cell(row.paper_mas_cycles / 1e6, mas / 1e6);
            for s in Schedule::BASELINES {
                line += &cell(row.paper.get(s), row.ours.get(s));
            }
            lines.push(line);
        }
        let mut means = format!("{:NAME_WIDTH$} | {:19}", "Geometric mean", "");
        for s in Schedule::BASELINES {
            means += &cell(self.paper_geomean.get(s), self.ours_geomean.get(s));
        }
        lines.push(means);
        for line in lines {
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}
