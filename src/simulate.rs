//! `ircc simulate-attention`: the MAS-Attention edge simulator
//! (`ircc-attention-sim`) from the command line.

use std::io::Write;

use ircc_attention_sim::{
    Accelerator, Schedule, SearchOptions, Strategy, Workload, simulate, table2,
};
use ircc_core::Diagnostic;

use crate::{Failure, SimulateAttentionArgs, stdout_err};

fn plain(e: impl std::fmt::Display) -> Failure {
    Diagnostic::plain(format!("simulate-attention: {e}")).into()
}

/// Whether `text` names `w`: its whole name or one of the networks it
/// lists ("BERT-Base & T5-Base"), with or without an aside in brackets,
/// in any case.
fn names(w: &Workload, text: &str) -> bool {
    let text = text.trim();
    std::iter::once(w.name.as_str())
        .chain(w.name.split(" & "))
        .flat_map(|n| [n, n.split(" (").next().unwrap_or(n)])
        .any(|n| n.eq_ignore_ascii_case(text))
}

/// A workload of Table 1 by name, or `H,S,E`.
fn workload(text: &str) -> Result<Workload, Failure> {
    let known = Workload::table1();
    if let Some(w) = known.iter().find(|w| names(w, text)) {
        return Ok(w.clone());
    }
    if !text.contains(',') {
        let names: Vec<&str> = known.iter().map(|w| w.name.as_str()).collect();
        return Err(plain(format!(
            "no workload '{text}' in Table 1 (one of {}, or HEADS,SEQUENCE,EMBEDDING)",
            names.join(", ")
        )));
    }
    Workload::parse(text).map_err(plain)
}

fn search(args: &SimulateAttentionArgs) -> Result<SearchOptions, Failure> {
    let strategy = match args.search.as_str() {
        "genetic" => Strategy::Genetic,
        "mcts" => Strategy::Mcts,
        "grid" => Strategy::Grid,
        other => {
            return Err(plain(format!(
                "no search '{other}' (genetic, mcts or grid)"
            )));
        }
    };
    let mut options = SearchOptions {
        strategy,
        seed: args.seed,
        ..SearchOptions::default()
    };
    if let Some(budget) = args.budget {
        options.budget = budget;
    }
    Ok(options)
}

pub(crate) fn simulate_attention(
    args: &SimulateAttentionArgs,
    stdout: &mut dyn Write,
) -> Result<(), Failure> {
    let acc = Accelerator::default();
    let options = search(args)?;
    if args.table2 {
        let table = table2(&acc, &options).map_err(plain)?;
        return write!(stdout, "{table}").map_err(stdout_err);
    }
    let text = args.workload.as_deref().unwrap_or_default();
    let workload = workload(text)?;
    let schedule: Schedule = args.schedule.parse().map_err(plain)?;
    let report = simulate(&acc, &workload, schedule, &options).map_err(plain)?;
    if args.json {
        let json = serde_json::to_string(&report).map_err(plain)?;
        return writeln!(stdout, "{json}").map_err(stdout_err);
    }
    writeln!(
        stdout,
        "{} under {}: {} cycles ({:.3} ms at {:.2} GHz), DRAM {} bytes read and {} written, MAC utilization {:.1}%, energy {:.1} uJ",
        workload.name,
        schedule.name(),
        report.cycles,
        report.cycles as f64 / acc.clock_hz as f64 * 1e3,
        acc.clock_hz as f64 / 1e9,
        report.dram_read_bytes,
        report.dram_write_bytes,
        100.0 * report.mac_utilization,
        report.energy.total_pj / 1e6,
    )
    .map_err(stdout_err)
}
