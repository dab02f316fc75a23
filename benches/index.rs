//! Lowers the layout ops of Swin-T (the torchscript export in tests/models)
//! to views and times simplifying all their maps.
//! `cargo bench --bench index`

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use ircc_core::pass::{Pass, PassContext, PassOptions};

fn main() {
    let root = common::root();
    let path = root.join("tests/models/swin_t_w24.onnx");
    let registry = ircc_dialects::registry().unwrap();
    let ctx = PassContext::new(&registry);
    let t = Instant::now();
    let imported = ircc_onnx::import_file(&path, &registry, &Default::default()).unwrap();
    let import_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut module = imported.module;
    ircc_passes::index::LowerLayoutOps
        .run(&mut module, &ctx)
        .unwrap();
    let mut views = 0;
    let mut before = 0;
    module.walk(|op| {
        if let Some(ircc_core::Attribute::AffineMap(m)) = module.op(op).attr("map") {
            views += 1;
            before += m.div_mod_count();
        }
    });
    let mut times = Vec::new();
    let mut after = 0;
    for _ in 0..10 {
        let mut m = module.clone();
        let mut simplify = ircc_passes::index::Simplify::new(
            ircc_passes::decl::IndexSimplifyOptions::parse(&PassOptions::default()).unwrap(),
        );
        let t = Instant::now();
        simplify.run(&mut m, &ctx).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        after = 0;
        m.walk(|op| {
            if let Some(ircc_core::Attribute::AffineMap(map)) = m.op(op).attr("map") {
                after += map.div_mod_count();
            }
        });
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{}: import {import_ms:.1} ms",
        path.file_name().unwrap().to_string_lossy()
    );
    println!("  {views} views, {before} floordiv/mod before simplification, {after} after");
    println!(
        "  index.simplify over all maps: median {:.2} ms (min {:.2}, max {:.2})",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
}
