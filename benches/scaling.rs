//! Linear time on large modules: a chain of N relus and a fan-out where one
//! value is read N times (N adds), at N = 10^5 and 10^6, through parse,
//! verify, the `smartmem` pipeline and print. Reports each phase, the peak
//! memory and the growth from 10^5 to 10^6 (10.0x is linear).
//! `cargo bench -p ircc --bench scaling [-- SIZE...]`
//!
//! Each size runs in a child process, so its peak memory is its own.

use std::process::Command;
use std::time::Instant;

use ircc_core::pass::{PassManager, RunOptions, parse_pipeline_file};
use ircc_core::verify::{VerifyOptions, verify};
use ircc_core::{Form, parse_module, print_module};

const SMARTMEM: &str = include_str!("../spec/pipelines/smartmem.pipeline");

fn module_text(kind: &str, n: usize) -> String {
    let t = "tensor<4xf32>";
    let mut s = format!("func.func @main(%x: {t}) -> {t} {{\n");
    let mut prev = "%x".to_string();
    for i in 0..n {
        match kind {
            "chain" => s += &format!("  %{i} = graph.relu {prev} : {t} -> {t}\n"),
            _ => s += &format!("  %{i} = graph.add {prev}, %x : {t}, {t} -> {t}\n"),
        }
        prev = format!("%{i}");
    }
    s += &format!("  func.return {prev} : {t}\n}}\n");
    s
}

/// The process's peak resident memory, in MiB.
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Runs one case and prints `parse verify smartmem print total peak`.
fn child(kind: &str, n: usize) {
    let text = module_text(kind, n);
    let driver = ircc::Driver::new().expect("driver");
    let specs = parse_pipeline_file(SMARTMEM).expect("the smartmem pipeline");
    let mut pm = PassManager::from_specs(driver.passes(), &specs).expect("passes");
    let t0 = Instant::now();
    let mut m = parse_module(&text, None).expect("parses");
    let t1 = Instant::now();
    verify(&m, driver.registry(), VerifyOptions::default()).expect("verifies");
    let t2 = Instant::now();
    pm.run(
        &mut m,
        driver.registry(),
        &RunOptions::default(),
        &mut std::io::sink(),
    )
    .expect("smartmem runs");
    let t3 = Instant::now();
    let out = print_module(&m, Form::Pretty);
    let t4 = Instant::now();
    std::hint::black_box(out);
    let s = |a: Instant, b: Instant| (b - a).as_secs_f64();
    println!(
        "{} {} {} {} {} {}",
        s(t0, t1),
        s(t1, t2),
        s(t2, t3),
        s(t3, t4),
        s(t0, t4),
        peak_mib()
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if let [flag, kind, n] = args.as_slice()
        && flag == "--child"
    {
        child(kind, n.parse().expect("a size"));
        return;
    }
    let sizes: Vec<usize> = if args.is_empty() {
        vec![100_000, 1_000_000]
    } else {
        args.iter().map(|a| a.parse().expect("a size")).collect()
    };
    let me = std::env::current_exe().expect("the bench's own path");
    println!("scaling: seconds per phase (smartmem pipeline), peak memory");
    println!(
        "{:<7} {:>9} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9}",
        "module", "ops", "parse", "verify", "smartmem", "print", "total", "peak MiB"
    );
    for kind in ["chain", "fan-out"] {
        let mut totals = Vec::new();
        for &n in &sizes {
            let out = Command::new(&me)
                .args(["--child", kind, &n.to_string()])
                .output()
                .expect("the child runs");
            let line = String::from_utf8_lossy(&out.stdout);
            let f: Vec<f64> = line
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if !out.status.success() || f.len() != 6 {
                println!(
                    "{kind} {n}: failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                continue;
            }
            println!(
                "{kind:<7} {n:>9} {:>8.2} {:>8.2} {:>9.2} {:>8.2} {:>8.2} {:>9.0}",
                f[0], f[1], f[2], f[3], f[4], f[5]
            );
            totals.push((n, f[4]));
        }
        if let [(n0, t0), .., (n1, t1)] = totals.as_slice() {
            println!(
                "{kind:<7} growth {n0} -> {n1}: time {:.1}x for {:.0}x the ops",
                t1 / t0,
                *n1 as f64 / *n0 as f64
            );
        }
    }
}
