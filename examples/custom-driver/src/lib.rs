//! An ircc of one's own: the stock driver with the example plugin's pass
//! linked in, the way one builds a custom `mlir-opt`. (The same pass also
//! loads into the stock `ircc` as a plugin library.)

/// ircc with the example pass added.
pub fn driver() -> Result<ircc::Driver, ircc_core::Diagnostic> {
    let mut d = ircc::Driver::new()?;
    let (registry, passes) = d.registries_mut();
    ircc_example_plugin::register(registry, passes);
    Ok(d)
}
