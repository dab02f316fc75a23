//! The public API: a hand-computed run, determinism, the search against
//! grid search, invariants across schedules, and input validation.

use ircc_attention_sim::{
    Accelerator, Schedule, SearchOptions, SimError, Strategy, Tiling, TilingError, Workload,
    simulate, simulate_tiling,
};

fn acc() -> Accelerator {
    Accelerator::default()
}

/// FLAT on one head of S = 16, E = 16 with a single 16-row block, by hand.
/// Every transfer is 16 × 16 FP16 = 512 bytes = 64 cycles at 8 B/cycle.
#[test]
fn tiny_flat_by_hand() {
    let w = Workload::new("tiny", 1, 16, 16).unwrap();
    let r = simulate_tiling(
        &acc(),
        &w,
        Schedule::Flat,
        Tiling {
            rows: 16,
            inner: None,
        },
    )
    .unwrap();
    // K_h 0..64, V_h 64..128, Q 128..192 (program order on the channel).
    let q_loaded = 3 * 64;
    // Each core takes 8 rows: QKᵀ is one pass of an 8×16 block (8 lanes by
    // 16) streaming 16 slices.
    let qk = 16;
    // 8 rows of 16 on 256 lanes: one sweep per op, 51 ops, plus two
    // 8-step reductions.
    let softmax = 8 * (51 + 16);
    let pv = 16;
    let store = 64;
    assert_eq!(r.cycles, q_loaded + qk + softmax + pv + store);
    assert_eq!(r.dram_read_bytes, 3 * 512);
    assert_eq!(r.dram_write_bytes, 512);
    assert_eq!(r.accesses.mac_ops, 2 * 16 * 16 * 16);
    assert_eq!(r.accesses.vec_ops, 16 * 16 * 51);
}

#[test]
fn same_seed_gives_the_same_report() {
    let w = Workload::parse("12,512,768").unwrap();
    for strategy in [Strategy::Genetic, Strategy::Mcts] {
        let opts = SearchOptions {
            strategy,
            seed: 42,
            budget: 16,
        };
        let a = simulate(&acc(), &w, Schedule::Mas, &opts).unwrap();
        let b = simulate(&acc(), &w, Schedule::Mas, &opts).unwrap();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
    }
}

/// On a space small enough to enumerate (4 × 4 tilings), the heuristics
/// with a budget of 10 land within 3% of the grid search's optimum.
#[test]
fn heuristics_come_close_to_grid_search() {
    let w = Workload::parse("4,128,256").unwrap();
    for schedule in Schedule::ALL {
        let grid = SearchOptions {
            strategy: Strategy::Grid,
            ..SearchOptions::default()
        };
        let best = simulate(&acc(), &w, schedule, &grid).unwrap().cycles as f64;
        for strategy in [Strategy::Genetic, Strategy::Mcts] {
            let opts = SearchOptions {
                strategy,
                seed: 7,
                budget: 10,
            };
            let found = simulate(&acc(), &w, schedule, &opts).unwrap();
            assert!(found.tilings_simulated <= 10);
            let gap = found.cycles as f64 / best - 1.0;
            assert!(
                gap <= 0.03,
                "{schedule} {strategy:?}: {:.1}% above grid",
                100.0 * gap
            );
        }
    }
}

/// §5.3.3: every schedule performs the same computation; §5.4.1: FLAT and
/// MAS write only O to DRAM.
#[test]
fn schedules_share_the_work_and_fused_ones_write_only_o() {
    let w = Workload::parse("8,256,512").unwrap();
    let reports: Vec<_> = Schedule::ALL
        .iter()
        .map(|&s| simulate(&acc(), &w, s, &SearchOptions::default()).unwrap())
        .collect();
    for r in &reports {
        assert_eq!(
            r.accesses.mac_ops, reports[0].accesses.mac_ops,
            "{}",
            r.schedule
        );
        assert_eq!(
            r.accesses.vec_ops, reports[0].accesses.vec_ops,
            "{}",
            r.schedule
        );
        assert!(r.energy.total_pj > 0.0);
    }
    let o_bytes = 8 * 256 * 64 * 2;
    for r in reports
        .iter()
        .filter(|r| [Schedule::Flat, Schedule::TileFlow, Schedule::Mas].contains(&r.schedule))
    {
        assert_eq!(r.dram_write_bytes, o_bytes, "{}", r.schedule);
    }
    // Layer-Wise also writes C and P, Soft-Pipe P.
    let p_bytes = 8 * 256 * 256 * 2;
    assert_eq!(reports[0].dram_write_bytes, o_bytes + 2 * p_bytes);
    assert_eq!(reports[1].dram_write_bytes, o_bytes + p_bytes);
}

/// §4.3: with too little L1 for its K/V sub-tiles, MAS overwrites them
/// with P, reloads them and redoes the halted MatMul tile.
#[test]
fn proactive_overwrite_reloads_and_redoes() {
    let w = Workload::parse("2,512,128").unwrap();
    let t = Tiling {
        rows: 512,
        inner: Some(512),
    };
    let roomy = simulate_tiling(&acc(), &w, Schedule::Mas, t).unwrap();
    // Two row blocks and the Q/O blocks (1.25 MiB) fit, the K/V sub-tiles
    // on top (another 0.25 MiB) do not.
    let tight = Accelerator {
        l1_bytes: 1_400_000,
        ..acc()
    };
    let overwritten = simulate_tiling(&tight, &w, Schedule::Mas, t).unwrap();
    assert!(overwritten.dram_read_bytes > roomy.dram_read_bytes);
    assert!(overwritten.accesses.mac_ops > roomy.accesses.mac_ops);
    assert!(overwritten.cycles > roomy.cycles);
    let tiny = Accelerator {
        l1_bytes: 1_000_000,
        ..acc()
    };
    assert!(matches!(
        simulate_tiling(&tiny, &w, Schedule::Mas, t),
        Err(SimError::InvalidTiling(TilingError::ExceedsL1 { .. }))
    ));
}

#[test]
fn bad_workloads_are_typed_errors() {
    let zero = Workload {
        name: "zero".into(),
        heads: 0,
        seq: 512,
        embed: 768,
    };
    let opts = SearchOptions::default();
    assert!(matches!(
        simulate(&acc(), &zero, Schedule::Mas, &opts),
        Err(SimError::InvalidWorkload(_))
    ));
    let absurd = Workload {
        name: "absurd".into(),
        heads: 1,
        seq: u32::MAX,
        embed: 1,
    };
    assert!(matches!(
        simulate(&acc(), &absurd, Schedule::Flat, &opts),
        Err(SimError::InvalidWorkload(_))
    ));
    assert!(matches!(
        Workload::parse("12;512;768"),
        Err(SimError::Parse(_))
    ));
}

/// The largest accepted workload has no tiling small enough to simulate:
/// the search rejects every point cheaply and reports it.
#[test]
fn huge_workloads_end_without_a_tiling() {
    let w = Workload::new("huge", 4096, 65536, 4096).unwrap();
    for schedule in Schedule::ALL {
        let r = simulate(&acc(), &w, schedule, &SearchOptions::default());
        assert!(
            matches!(r, Err(SimError::NoFeasibleTiling { .. })),
            "{schedule}: {r:?}"
        );
    }
}

#[test]
fn bad_tilings_and_options_are_typed_errors() {
    let w = Workload::parse("12,512,768").unwrap();
    let bad = simulate_tiling(
        &acc(),
        &w,
        Schedule::Mas,
        Tiling {
            rows: 100,
            inner: Some(64),
        },
    );
    assert!(matches!(
        bad,
        Err(SimError::InvalidTiling(TilingError::NotADivisor { .. }))
    ));
    let big = Workload::parse("64,1024,4096").unwrap();
    let fine = simulate_tiling(
        &acc(),
        &big,
        Schedule::LayerWise,
        Tiling {
            rows: 16,
            inner: Some(16),
        },
    );
    assert!(matches!(
        fine,
        Err(SimError::InvalidTiling(TilingError::TooManyTasks { .. }))
    ));
    let opts = SearchOptions {
        budget: 0,
        ..SearchOptions::default()
    };
    assert!(matches!(
        simulate(&acc(), &w, Schedule::Mas, &opts),
        Err(SimError::InvalidOptions(_))
    ));
    let broken = Accelerator {
        vec_lanes: 0,
        ..acc()
    };
    let r = simulate(&broken, &w, Schedule::Mas, &SearchOptions::default());
    assert!(matches!(r, Err(SimError::InvalidAccelerator(_))));
}

#[test]
fn reports_serialise() {
    let w = Workload::parse("4,128,256").unwrap();
    let r = simulate(&acc(), &w, Schedule::TileFlow, &SearchOptions::default()).unwrap();
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["schedule"], "tileflow");
    assert!(json["tiling"]["rows"].is_u64());
    assert!(json["energy"]["total_pj"].is_f64());
}
