//! Published-size networks imported and compiled as a user does: torchvision's
//! Swin-T, ViT-B/16 and ConvNeXt-T (both exporters), RegNetX-3.2GF and
//! ResNeXt-50 (TorchScript), batch 1.
//!
//! `benches/published/` holds their exports with the float weights stripped
//! (3.5 MB); each is given seeded random weights here, in one external-data
//! file as the exporters write them, under `target/published/` (made once;
//! timings do not depend on the values). Each network then runs in a child
//! process of its own, so the peak memory is its own:
//!
//! - import and the `smartmem` pipeline (what `ircc stats` times as
//!   `compile_ms`), through the library;
//! - `ircc compile NAME.onnx --pipeline smartmem -o DIR`: the same, then
//!   kernel lowering, WGSL and the bundle with its weights written.
//!
//! `cargo bench --bench import [-- NAME...]`

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use ircc_core::pass::{PassManager, RunOptions, parse_pipeline_file};
use ircc_onnx::proto::{DATA_LOCATION_EXTERNAL, ModelProto, StringStringEntryProto, data_type};
use prost::Message;

const SMARTMEM: &str = include_str!("../spec/pipelines/smartmem.pipeline");

const NETWORKS: [&str; 8] = [
    "swin_t",
    "swin_t_dynamo",
    "vit_b_16",
    "vit_b_16_dynamo",
    "convnext_tiny",
    "convnext_tiny_dynamo",
    "regnet_x_3_2gf",
    "resnext50_32x4d",
];

/// The process's peak resident memory, in MB.
fn peak_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb * 1024.0 / 1e6)
}

/// `name`'s model with weights at `dir/NAME.onnx` (and `.onnx.data`),
/// made from its structure if missing; returns it and the weights' bytes.
fn filled(name: &str, dir: &Path) -> (PathBuf, u64) {
    let model_path = dir.join(format!("{name}.onnx"));
    let data_file = format!("{name}.onnx.data");
    let data_path = dir.join(&data_file);
    if let (Ok(_), Ok(meta)) = (
        std::fs::metadata(&model_path),
        std::fs::metadata(&data_path),
    ) {
        return (model_path, meta.len());
    }
    let structure = common::root().join(format!("benches/published/{name}.structure.onnx"));
    let bytes = std::fs::read(&structure).expect("the structure is in benches/published");
    let mut model = ModelProto::decode(&bytes[..]).expect("an ONNX model");
    let mut data: Vec<u8> = Vec::new();
    // A seeded xorshift: values in [-0.05, 0.05).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let graph = model.graph.as_mut().expect("a graph");
    for t in &mut graph.initializer {
        let empty = t.raw_data.is_empty() && t.float_data.is_empty() && t.external_data.is_empty();
        if t.data_type != data_type::FLOAT || !empty {
            continue;
        }
        let n: i64 = t.dims.iter().product();
        let offset = data.len();
        for _ in 0..n {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let v = ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
            data.extend(v.to_le_bytes());
        }
        let entry = |k: &str, v: String| StringStringEntryProto {
            key: k.into(),
            value: v,
        };
        t.data_location = DATA_LOCATION_EXTERNAL;
        t.external_data = vec![
            entry("location", data_file.clone()),
            entry("offset", offset.to_string()),
            entry("length", (data.len() - offset).to_string()),
        ];
    }
    std::fs::create_dir_all(dir).expect("target/published");
    std::fs::write(&data_path, &data).expect("the weights are written");
    std::fs::write(&model_path, model.encode_to_vec()).expect("the model is written");
    (model_path, data.len() as u64)
}

/// Imports `path` and runs `smartmem`; prints `import_ms smartmem_ms peak_mb`.
fn child_pipeline(path: &Path) {
    let driver = ircc::Driver::new().expect("driver");
    let specs = parse_pipeline_file(SMARTMEM).expect("the smartmem pipeline");
    let mut pm = PassManager::from_specs(driver.passes(), &specs).expect("passes");
    let t0 = Instant::now();
    let imported = ircc_onnx::import_file(path, driver.registry(), &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t1 = Instant::now();
    let mut module = imported.module;
    pm.run(
        &mut module,
        driver.registry(),
        &RunOptions::default(),
        &mut std::io::sink(),
    )
    .expect("smartmem runs");
    let t2 = Instant::now();
    std::hint::black_box((&module, &imported.weights));
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    println!("{} {} {}", ms(t0, t1), ms(t1, t2), peak_mb());
}

/// `ircc compile path --pipeline smartmem -o out`; prints `ms peak_mb`.
fn child_compile(path: &Path, out: &Path) {
    let driver = ircc::Driver::new().expect("driver");
    let t0 = Instant::now();
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = driver.run_cli(
        [
            "ircc",
            "compile",
            path.to_str().expect("a UTF-8 path"),
            "--pipeline",
            "smartmem",
            "--quiet",
            "-o",
            out.to_str().expect("a UTF-8 path"),
        ],
        &mut stdout,
        &mut stderr,
    );
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&stderr));
    println!("{} {}", t0.elapsed().as_secs_f64() * 1e3, peak_mb());
}

/// Runs this bench as a child; its numbers, or why it failed.
fn child(args: &[&str]) -> Result<Vec<f64>, String> {
    let me = std::env::current_exe().expect("the bench's own path");
    let out = Command::new(me)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect())
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["--pipeline", path] => return child_pipeline(Path::new(path)),
        ["--compile", path, out] => return child_compile(Path::new(path), Path::new(out)),
        _ => {}
    }
    let names: Vec<&str> = if args.is_empty() {
        NETWORKS.to_vec()
    } else {
        args.iter().map(String::as_str).collect()
    };
    let dir = common::root().join("target/published");
    println!(
        "import: published-size networks, smartmem (ms; peak memory in MB and per byte of weights)"
    );
    println!(
        "{:<21} {:>8} {:>8} {:>9} {:>8} {:>11} {:>12} {:>12}",
        "network", "weights", "import", "smartmem", "total", "peak", "ircc compile", "peak"
    );
    for name in names {
        let (path, weights) = filled(name, &dir);
        let mb = weights as f64 / 1e6;
        let path_text = path.to_string_lossy().into_owned();
        let bundle = dir.join(format!("{name}.bundle"));
        let _ = std::fs::remove_dir_all(&bundle);
        let pipeline = child(&["--pipeline", &path_text]);
        let compile = child(&["--compile", &path_text, &bundle.to_string_lossy()]);
        match (pipeline.as_deref(), compile.as_deref()) {
            (Ok([import, smartmem, peak]), Ok([compile, compile_peak])) => println!(
                "{name:<21} {mb:>8.1} {import:>8.1} {smartmem:>9.1} {:>8.1} {peak:>5.0} {:>4.2}x {compile:>12.0} {compile_peak:>5.0} {:>4.2}x",
                import + smartmem,
                peak / mb,
                compile_peak / mb
            ),
            (p, c) => println!("{name}: failed: {p:?} {c:?}"),
        }
        let _ = std::fs::remove_dir_all(&bundle);
    }
}
