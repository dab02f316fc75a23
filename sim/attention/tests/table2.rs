//! Reproduction of the paper's Table 2: MAS-Attention's speed-up over each
//! baseline on the 12 workloads of Table 1, against the paper's figures.

use std::sync::OnceLock;

use ircc_attention_sim::{Accelerator, Schedule, SearchOptions, Table2, deviation, table2};

/// Tolerance per speed-up.
const PER_FIGURE: f64 = 0.25;
/// Tolerance per geometric mean.
const GEOMEAN: f64 = 0.10;

/// Speed-ups this model does not bring within ±25%, and why. Each is still
/// checked: it must stay outside the tolerance (or this list is stale) and
/// within `EXCEPTION_BAND` (or the model has drifted).
const EXCEPTIONS: [(&str, Schedule, &str); 3] = [
    (
        "Llama3-8B & T5-3B (T5-XL)",
        Schedule::Flat,
        "the paper's FLAT is only 0.06 cycles per score element slower than MAS \
         at E = 128, against 0.19-0.29 on every other workload; FLAT's exposed \
         softmax and per-block Q/O transfers do not shrink with E (the Q/O \
         transfers grow with it)",
    ),
    ("XLM", Schedule::Flat, "as for Llama3-8B: E = 128"),
    (
        "ViT-H/14",
        Schedule::LayerWise,
        "the paper's Layer-Wise costs ViT-L/14 and ViT-H/14 about twice \
         ViT-B/14 per head although their heads have the same S and similar \
         E; a per-head model that reproduces ViT-B/14 (4.06) falls short \
         here, and MAS itself runs 5% above the paper on S = 196, where its \
         DRAM traffic exactly equals its MAC time",
    ),
];
const EXCEPTION_BAND: f64 = 0.40;

fn table() -> &'static Table2 {
    static TABLE: OnceLock<Table2> = OnceLock::new();
    TABLE.get_or_init(|| {
        table2(&Accelerator::default(), &SearchOptions::default()).expect("Table 2 simulates")
    })
}

fn is_exception(workload: &str, baseline: Schedule) -> bool {
    EXCEPTIONS
        .iter()
        .any(|&(w, s, _)| w == workload && s == baseline)
}

#[test]
fn speedups_are_within_25_percent_of_the_paper() {
    let mut misses = Vec::new();
    for row in &table().rows {
        for baseline in Schedule::BASELINES {
            let dev = deviation(row.ours.get(baseline), row.paper.get(baseline));
            if !is_exception(&row.workload, baseline) && dev.abs() > PER_FIGURE {
                misses.push(format!(
                    "{} vs {baseline}: {:+.1}%",
                    row.workload,
                    100.0 * dev
                ));
            }
        }
    }
    assert!(misses.is_empty(), "outside ±25%: {misses:#?}");
}

#[test]
fn exceptions_still_miss_but_stay_near() {
    for (workload, baseline, why) in EXCEPTIONS {
        let row = table()
            .rows
            .iter()
            .find(|r| r.workload == workload)
            .expect("workload in Table 1");
        let dev = deviation(row.ours.get(baseline), row.paper.get(baseline)).abs();
        assert!(
            dev > PER_FIGURE,
            "{workload} vs {baseline} now reproduces; drop it from EXCEPTIONS"
        );
        assert!(
            dev < EXCEPTION_BAND,
            "{workload} vs {baseline} drifted to {dev:.2} ({why})"
        );
    }
}

#[test]
fn geometric_means_are_within_10_percent_of_the_paper() {
    let t = table();
    for baseline in Schedule::BASELINES {
        let dev = deviation(t.ours_geomean.get(baseline), t.paper_geomean.get(baseline));
        assert!(
            dev.abs() <= GEOMEAN,
            "{baseline}: geometric mean off by {:+.1}%",
            100.0 * dev
        );
    }
}

/// MAS-Attention's own cycles are the MAC time of both MatMuls, as in the
/// paper; the event-level pipeline adds its fill and drain.
#[test]
fn mas_cycles_match_the_paper() {
    for row in &table().rows {
        let ours = row.cycles(Schedule::Mas) as f64;
        let dev = deviation(ours, row.paper_mas_cycles);
        assert!(
            (0.0..0.08).contains(&dev),
            "{}: MAS cycles off by {:+.1}%",
            row.workload,
            100.0 * dev
        );
    }
}

#[test]
fn comparison_table_text() {
    insta::assert_snapshot!(table().to_string());
}
