//! The host runs bundles ircc wrote, and its outputs are ircc's: the same
//! as `ircc run DIR` on the bundle, and the model's reference output.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ircc_bundle_host::{Data, run};
use ircc_core::ElemType;

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/models")
}

/// Compiles `model` (in tests/models) with smartmem into the bundle `dir`
/// with `ircc compile`, and checks its plan.json against the schema.
fn compile(model: &str, dir: &Path) {
    let onnx = models().join(format!("{model}.onnx"));
    let (code, text) = ircc(&[
        "compile",
        onnx.to_str().unwrap(),
        "--pipeline",
        "smartmem",
        "-o",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../spec/plan.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema).unwrap()).unwrap();
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a schema");
    assert!(
        validator.is_valid(&plan),
        "{model}: plan.json breaks the schema"
    );
}

/// ircc's command line, in this process.
fn ircc(args: &[&str]) -> (i32, String) {
    let driver = ircc::Driver::new().expect("the built-in passes load");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = driver.run_cli(
        std::iter::once("ircc").chain(args.iter().copied()),
        &mut out,
        &mut err,
    );
    let text = String::from_utf8_lossy(&out).into_owned() + &String::from_utf8_lossy(&err);
    (code, text)
}

/// Whether a GPU adapter opens; without one the test is skipped, unless
/// `IRCC_REQUIRE_GPU` is set (CI sets it), when it fails.
fn gpu_or_skip(error: &str) -> bool {
    if error.contains("no GPU adapter") {
        assert!(
            std::env::var_os("IRCC_REQUIRE_GPU").is_none(),
            "IRCC_REQUIRE_GPU is set but no GPU adapter opens: {error}"
        );
        eprintln!("skipped: no GPU adapter");
        return false;
    }
    true
}

fn floats(d: &Data) -> Vec<f32> {
    assert_eq!(d.dtype, "f32");
    d.bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The model's reference input, named as the bundle's plan names it.
fn input_of(model: &str, bundle: &Path) -> HashMap<String, Data> {
    let input =
        ircc_reference::read_npy(&models().join(format!("{model}.input.npy"))).expect("the input");
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("plan.json")).unwrap()).unwrap();
    let name = plan["buffers"][plan["inputs"][0].as_u64().unwrap() as usize]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let data = Data {
        dtype: "f32".into(),
        shape: input.shape().to_vec(),
        bytes: input
            .to_f64()
            .iter()
            .flat_map(|&x| (x as f32).to_le_bytes())
            .collect(),
    };
    HashMap::from([(name, data)])
}

/// Compiles `model` into a bundle with `ircc compile`, runs it with this host
/// and with `ircc run DIR`, and compares both with the reference output.
fn host_matches_ircc(model: &str, kind: &str) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let bundle = dir.path().join("bundle");
    compile(model, &bundle);

    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(bundle.join("plan.json")).unwrap()).unwrap();
    let kinds: Vec<&str> = plan["buffers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&kind),
        "{model}: no {kind} buffer in {kinds:?}"
    );
    let input_npy = models().join(format!("{model}.input.npy"));
    let outputs = match run(&bundle, &input_of(model, &bundle)) {
        Ok(o) => o,
        Err(e) if !gpu_or_skip(&e) => return,
        Err(e) => panic!("{model}: the host failed: {e}"),
    };
    assert_eq!(outputs.len(), 1);
    let host = floats(&outputs[0].1);

    let out_dir = dir.path().join("out");
    let (code, text) = ircc(&[
        "run",
        bundle.to_str().unwrap(),
        "--input",
        input_npy.to_str().unwrap(),
        "--output-dir",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    let by_ircc = ircc_reference::read_npy(&out_dir.join(format!("{}.npy", outputs[0].0)))
        .expect("ircc's output");
    assert_eq!(by_ircc.elem, ElemType::F32);
    let by_ircc: Vec<f32> = by_ircc.to_f64().iter().map(|&x| x as f32).collect();
    assert_eq!(host, by_ircc, "{model}: the host and ircc run DIR differ");

    let reference = ircc_reference::read_npy(&models().join(format!("{model}.output.npy")))
        .expect("the reference output");
    let reference = reference.to_f64();
    let scale = reference.iter().fold(0f64, |m, x| m.max(x.abs()));
    let worst = host
        .iter()
        .zip(reference.iter())
        .fold(0f64, |m, (&a, &b)| m.max((a as f64 - b).abs()));
    assert!(
        worst <= 1e-4 * scale,
        "{model}: the host's output is {worst} from the reference (scale {scale})"
    );
}

#[test]
fn runs_a_bundle_with_textures_as_ircc_does() {
    // Swin-T's smartmem plan keeps intermediates in textures.
    host_matches_ircc("swin_t_w24_dynamo", "texture");
}

#[test]
fn runs_a_bundle_with_fused_attention_as_ircc_does() {
    host_matches_ircc("bert_l2_w64", "weight");
}

/// A damaged bundle gets an error naming what is wrong, never a panic, a
/// read outside its folder, or a silently wrapped count.
#[test]
fn refuses_a_damaged_bundle() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let bundle = dir.path().join("bundle");
    compile("swin_t_w24_dynamo", &bundle);
    let original = std::fs::read_to_string(bundle.join("plan.json")).unwrap();
    let input = input_of("swin_t_w24_dynamo", &bundle);
    std::os::unix::fs::symlink("/etc/hostname", bundle.join("outside.wgsl")).unwrap();
    type Damage = fn(&mut serde_json::Value);
    let cases: [(Damage, &str); 5] = [
        (
            |p| p["weights"] = "../../../etc/passwd".into(),
            "is not a file of the bundle's folder",
        ),
        (
            |p| p["weights"] = "/etc/passwd".into(),
            "is not a file of the bundle's folder",
        ),
        (
            |p| p["dispatches"][0]["shader"] = "outside.wgsl".into(),
            "is not a file of the bundle's folder",
        ),
        (
            |p| p["dispatches"][0]["workgroups"][0] = (1u64 << 32).into(),
            "does not fit 32 bits",
        ),
        (
            |p| {
                let t = p["buffers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .position(|b| b["kind"] == "texture")
                    .unwrap();
                p["buffers"][t]["texels"] = serde_json::json!([]);
            },
            "needs [width, height] texels",
        ),
    ];
    for (damage, expected) in cases {
        let mut plan: serde_json::Value = serde_json::from_str(&original).unwrap();
        damage(&mut plan);
        std::fs::write(bundle.join("plan.json"), plan.to_string()).unwrap();
        match run(&bundle, &input) {
            Ok(_) => panic!("a damaged bundle ran ({expected})"),
            Err(e) if !gpu_or_skip(&e) => return,
            Err(e) => assert!(e.contains(expected), "expected '{expected}' in: {e}"),
        }
    }
}
