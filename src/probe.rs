//! `ircc probe`: the device profile of the GPU wgpu opens, measured.

use std::io::Write;
#[cfg(feature = "wgpu")]
use std::time::Instant;

use crate::Outcome;
use crate::cli::ProbeArgs;
use crate::gpu::plain;

/// `ircc probe`: the profile of the GPU wgpu opens.
#[cfg(feature = "wgpu")]
pub(crate) fn probe_command(
    args: &ProbeArgs,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Outcome {
    let name = match (&args.name, &args.output) {
        (Some(n), _) => n.clone(),
        (None, Some(path)) => path
            .file_stem()
            .map_or("probed".into(), |s| s.to_string_lossy().into_owned()),
        (None, None) => "probed".into(),
    };
    let start = Instant::now();
    let probe = ircc_wgsl::probe::probe(args.quick).map_err(plain)?;
    let text = probe.to_profile_toml(&name);
    // What the probe writes must read back as a profile; a figure it got
    // wrong (zero, not finite) is an error here, naming it, not in the
    // file.
    ircc_dialects::kernel::DeviceProfile::parse(&text).map_err(|e| {
        plain(format!(
            "the probe's profile does not read back: {e}\n{text}"
        ))
    })?;
    let _ = writeln!(
        stderr,
        "probed '{}' ({}) in {:.1} s",
        probe.adapter,
        probe.driver,
        start.elapsed().as_secs_f64()
    );
    match &args.output {
        Some(path) => {
            std::fs::write(path, text).map_err(|e| plain(format!("{}: {e}", path.display())))?
        }
        None => {
            let _ = write!(stdout, "{text}");
        }
    }
    Ok(())
}

#[cfg(not(feature = "wgpu"))]
pub(crate) fn probe_command(_: &ProbeArgs, _: &mut dyn Write, _: &mut dyn Write) -> Outcome {
    Err(plain(
        "this ircc was built without the wgpu backend (cargo feature 'wgpu'), which ircc probe measures through",
    ))
}
