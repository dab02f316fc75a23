//! `bundle-host DIR INPUTS.safetensors OUTPUTS.safetensors`: runs the ircc
//! bundle in DIR on the inputs (tensors named as the plan's inputs, in
//! their dtype) and writes its outputs the same way.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use ircc_bundle_host::{Data, run};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, inputs, outputs] = args.as_slice() else {
        eprintln!("usage: bundle-host DIR INPUTS.safetensors OUTPUTS.safetensors");
        return ExitCode::from(2);
    };
    match host(Path::new(dir), Path::new(inputs), Path::new(outputs)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn host(dir: &Path, inputs: &Path, outputs: &Path) -> Result<(), String> {
    let bytes = std::fs::read(inputs).map_err(|e| format!("{}: {e}", inputs.display()))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
    let mut given = HashMap::new();
    for (name, view) in file.tensors() {
        let dtype = match view.dtype() {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::I32 => "i32",
            Dtype::I8 => "i8",
            Dtype::U8 => "ui8",
            other => {
                return Err(format!(
                    "input '{name}' is {other:?}, not F32, F16, I32, I8 or U8"
                ));
            }
        };
        let data = Data {
            dtype: dtype.to_string(),
            shape: view.shape().to_vec(),
            bytes: view.data().to_vec(),
        };
        given.insert(name, data);
    }
    let results = run(dir, &given)?;
    let views = results
        .iter()
        .map(|(name, d)| {
            let dtype = match d.dtype.as_str() {
                "f16" => Dtype::F16,
                "i32" => Dtype::I32,
                _ => Dtype::F32,
            };
            TensorView::new(dtype, d.shape.clone(), &d.bytes)
                .map(|v| (name.clone(), v))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize_to_file(views, None, outputs).map_err(|e| e.to_string())
}
