//! The target a module is compiled for: the `ircc.target` attribute on
//! the module (as MLIR's `spirv.target_env` and IREE's
//! `#hal.executable.target`), set once by the driver — `--device NAME`, or
//! `--device auto`, the profile matching the adapter a command opens — and
//! read by every pass and printer that depends on the device. No pass
//! has a device option of its own.
//!
//! The attribute names the profile and why it was chosen; a profile that
//! is not one of the embedded ones (read from `--spec-dir`, or built from
//! an adapter no profile matches) is carried whole, so the printed module
//! compiles the same anywhere:
//!
//! ```text
//! module attributes {ircc.target = {device = "lavapipe", reason = "..."}}
//! ```

use ircc_core::{Attribute, Attributes, ElemType, Module, Type};

use super::device::{CooperativeMatrix, DeviceProfile, PROFILES};

/// The module attribute holding the target.
pub const TARGET_ATTR: &str = "ircc.target";

/// The profile of commands that open no device (`compile`, `--emit`,
/// `stats`) unless `--device` names one: the GPU of the SmartMem paper.
pub const DEFAULT_DEVICE: &str = "adreno740";

/// What a backend reports of the adapter it opens, for `--device auto`.
#[derive(Clone, Debug, PartialEq)]
pub struct Adapter {
    /// `vulkan` or `opencl`.
    pub api: String,
    pub name: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub is_cpu: bool,
    /// Queried where the API reports it (OpenCL's compute units).
    pub compute_units: Option<u32>,
    pub max_workgroup_invocations: Option<u32>,
    pub local_memory_bytes: Option<u64>,
    pub max_texture_extent: Option<u32>,
    pub max_storage_buffers: Option<u32>,
    /// The cooperative-matrix configurations the API reports (none
    /// through OpenCL, which has no cooperative matrices).
    pub cooperative_matrix: Vec<CooperativeMatrix>,
}

/// The profile a module is compiled for, and why it was chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleTarget {
    pub profile: DeviceProfile,
    pub reason: String,
}

impl ModuleTarget {
    /// The profile `--device NAME` names (an embedded one, or a
    /// `devices/NAME.toml` path from `--spec-dir`).
    pub fn named(name: &str, reason: &str) -> Result<ModuleTarget, String> {
        Ok(ModuleTarget {
            profile: DeviceProfile::named(name)?,
            reason: reason.to_string(),
        })
    }

    /// The profile among `profiles` that matches `adapter` most closely
    /// (a name pattern beats a vendor alone; ties go to the first); where
    /// none does, one built from the adapter's queried limits over the
    /// figures of `lavapipe` (a CPU) or of the default device (a GPU).
    pub fn for_adapter(adapter: &Adapter, profiles: &[DeviceProfile]) -> ModuleTarget {
        let described = format!(
            "the {} adapter '{}' (vendor {:#06x}, device {:#06x})",
            adapter.api, adapter.name, adapter.vendor_id, adapter.device_id
        );
        let best = profiles
            .iter()
            .filter_map(|p| Some((p.adapter.as_ref()?.matches(adapter)?, p)))
            .fold(
                None::<(u32, &DeviceProfile)>,
                |best, (score, p)| match best {
                    Some((s, _)) if s >= score => best,
                    _ => Some((score, p)),
                },
            );
        if let Some((_, profile)) = best {
            let mut profile = profile.clone();
            let mut reason = format!("--device auto: {described} matches its [adapter] pattern");
            // A profile describes the GPU, not the API it is reached
            // through: the matrices it lists that this adapter does not
            // offer (none through OpenCL) are not the target's.
            let listed = profile.cooperative_matrix.len();
            profile
                .cooperative_matrix
                .retain(|c| adapter.cooperative_matrix.iter().any(|a| a.same_shape(c)));
            if profile.cooperative_matrix.len() < listed {
                reason.push_str(&format!(
                    "; without the {} cooperative-matrix configuration(s) the adapter does not offer",
                    listed - profile.cooperative_matrix.len()
                ));
            }
            return ModuleTarget { profile, reason };
        }
        let base_name = if adapter.is_cpu {
            "lavapipe"
        } else {
            DEFAULT_DEVICE
        };
        let base = DeviceProfile::named(base_name).expect("an embedded profile");
        let profile = built_profile(adapter, base.clone()).unwrap_or(base);
        ModuleTarget {
            profile,
            reason: format!(
                "--device auto: no profile matches {described}; built from its queried limits over {base_name}'s figures (measure one with ircc probe)"
            ),
        }
    }

    /// The target attached to `m`, if any.
    pub fn of(m: &Module) -> Result<Option<ModuleTarget>, String> {
        let Some(attr) = m.attrs.get(TARGET_ATTR) else {
            return Ok(None);
        };
        let bad = |what: &str| format!("{TARGET_ATTR}: {what}");
        let Attribute::Dict(d) = attr else {
            return Err(bad("not a dictionary {device = NAME, reason = TEXT}"));
        };
        let device = d
            .get("device")
            .and_then(Attribute::as_str)
            .ok_or_else(|| bad("no string 'device'"))?;
        let reason = d.get("reason").and_then(Attribute::as_str).unwrap_or("");
        let profile = match d.get("profile") {
            Some(p) => {
                if !matches!(p, Attribute::Dict(_)) {
                    return Err(bad("'profile' is not a dictionary of a profile's figures"));
                }
                let value =
                    toml_of(p).ok_or_else(|| bad("'profile' is not a profile's figures"))?;
                let profile: DeviceProfile = value
                    .try_into()
                    .map_err(|e| bad(&format!("'profile': {e}")))?;
                let profile = profile.checked().map_err(|e| bad(&e))?;
                if profile.name != device {
                    return Err(bad("'profile' is named other than 'device'"));
                }
                profile
            }
            // A module names embedded profiles only: a path would have
            // ircc read a file the module chose.
            None if device.ends_with(".toml") => {
                return Err(bad(
                    "'device' names a profile file; a module carries such a profile whole, as 'profile'",
                ));
            }
            None => DeviceProfile::named(device).map_err(|e| bad(&e))?,
        };
        Ok(Some(ModuleTarget {
            profile,
            reason: reason.to_string(),
        }))
    }

    /// The attribute: the profile's name and the reason, and the profile's
    /// figures where they are not the embedded profile of that name.
    pub fn to_attr(&self) -> Attribute {
        let mut d = Attributes::new();
        d.insert(
            "device".into(),
            Attribute::String(self.profile.name.clone()),
        );
        d.insert("reason".into(), Attribute::String(self.reason.clone()));
        let embedded = PROFILES.iter().any(|(name, _)| {
            *name == self.profile.name
                && DeviceProfile::named(name).is_ok_and(|p| p == self.profile)
        });
        if !embedded {
            let value = toml::Value::try_from(&self.profile).expect("a profile serializes");
            d.insert("profile".into(), attr_of(&value));
        }
        Attribute::Dict(d)
    }

    /// Sets `m`'s target to this one.
    pub fn attach(&self, m: &mut Module) {
        m.attrs.insert(TARGET_ATTR.into(), self.to_attr());
    }
}

/// The profile `m` is compiled for: its target's, or the default device's
/// where none is attached (a pass run outside the driver).
pub fn target_profile(m: &Module) -> Result<DeviceProfile, String> {
    match ModuleTarget::of(m)? {
        Some(t) => Ok(t.profile),
        None => DeviceProfile::named(DEFAULT_DEVICE),
    }
}

/// `base` with what `adapter` reports in place of its figures.
fn built_profile(adapter: &Adapter, base: DeviceProfile) -> Result<DeviceProfile, String> {
    let mut p = base;
    p.name = "auto".into();
    p.vendor = match adapter.vendor_id {
        0x10de => "nvidia",
        0x1002 => "amd",
        0x8086 => "intel",
        0x5143 => "qualcomm",
        0x13b5 => "arm",
        0x10005 => "mesa",
        _ => "unknown",
    }
    .into();
    let known = |p: &mut DeviceProfile, field: &str| p.unknown.retain(|u| u != field);
    if let Some(units) = adapter.compute_units {
        p.compute_units = units;
    } else if adapter.is_cpu {
        p.compute_units = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    }
    if let Some(n) = adapter.max_workgroup_invocations {
        p.max_workgroup_invocations = Some(n);
        known(&mut p, "max_workgroup_invocations");
    }
    if let Some(n) = adapter.local_memory_bytes {
        p.local_memory_bytes = Some(n);
        known(&mut p, "local_memory_bytes");
    }
    if let Some(n) = adapter.max_texture_extent {
        p.max_texture_extent = Some(n);
        known(&mut p, "max_texture_extent");
    }
    if let Some(n) = adapter.max_storage_buffers {
        p.max_storage_buffers = Some(n);
        known(&mut p, "max_storage_buffers");
    }
    // The template maps invocations to subgroups by the profile's subgroup
    // size, which a built profile borrows: its matrices wait for a probed
    // profile (ircc probe), which measures both.
    p.cooperative_matrix = Vec::new();
    p.adapter = None;
    p.checked()
}

/// A TOML value as an attribute (integers as i64, floats as f64).
fn attr_of(v: &toml::Value) -> Attribute {
    match v {
        toml::Value::String(s) => Attribute::String(s.clone()),
        toml::Value::Integer(i) => Attribute::i64(*i),
        toml::Value::Float(f) => Attribute::Float(*f, Type::Scalar(ElemType::F64)),
        toml::Value::Boolean(b) => Attribute::Bool(*b),
        toml::Value::Array(a) => Attribute::Array(a.iter().map(attr_of).collect()),
        toml::Value::Table(t) => {
            Attribute::Dict(t.iter().map(|(k, v)| (k.clone(), attr_of(v))).collect())
        }
        toml::Value::Datetime(d) => Attribute::String(d.to_string()),
    }
}

/// The TOML value an attribute written by [`attr_of`] stands for.
fn toml_of(a: &Attribute) -> Option<toml::Value> {
    Some(match a {
        Attribute::String(s) => toml::Value::String(s.clone()),
        Attribute::Int(i, _) => toml::Value::Integer(*i),
        Attribute::Float(f, _) => toml::Value::Float(*f),
        Attribute::Bool(b) => toml::Value::Boolean(*b),
        Attribute::Array(a) => toml::Value::Array(a.iter().map(toml_of).collect::<Option<_>>()?),
        Attribute::Dict(d) => toml::Value::Table(
            d.iter()
                .map(|(k, v)| Some((k.clone(), toml_of(v)?)))
                .collect::<Option<_>>()?,
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(name: &str, vendor_id: u32, is_cpu: bool) -> Adapter {
        Adapter {
            api: "vulkan".into(),
            name: name.into(),
            vendor_id,
            device_id: 0x2330,
            is_cpu,
            compute_units: None,
            max_workgroup_invocations: Some(512),
            local_memory_bytes: Some(49152),
            max_texture_extent: None,
            max_storage_buffers: Some(16),
            cooperative_matrix: Vec::new(),
        }
    }

    fn embedded() -> Vec<DeviceProfile> {
        PROFILES
            .iter()
            .map(|(n, _)| DeviceProfile::named(n).unwrap())
            .collect()
    }

    #[test]
    fn adapters_get_the_profile_whose_pattern_they_match() {
        let nvidia = adapter("NVIDIA H100 80GB HBM3", 0x10de, false);
        let t = ModuleTarget::for_adapter(&nvidia, &embedded());
        assert_eq!(t.profile.name, "nvidia_vulkan");
        assert!(t.reason.contains("'NVIDIA H100 80GB HBM3'"), "{}", t.reason);
        let lavapipe = adapter("llvmpipe (LLVM 15.0.6, 256 bits)", 0x10005, true);
        assert_eq!(
            ModuleTarget::for_adapter(&lavapipe, &embedded())
                .profile
                .name,
            "lavapipe"
        );
        let adreno = adapter("Adreno (TM) 740", 0x5143, false);
        assert_eq!(
            ModuleTarget::for_adapter(&adreno, &embedded()).profile.name,
            "adreno740"
        );
    }

    #[test]
    fn a_profile_keeps_only_the_cooperative_matrices_its_adapter_offers() {
        let listed = DeviceProfile::named("nvidia_vulkan").unwrap();
        let f16_f32 = CooperativeMatrix::f16_f32(16);
        assert!(
            listed
                .cooperative_matrix
                .iter()
                .any(|c| c.same_shape(&f16_f32))
        );
        let vulkan = Adapter {
            cooperative_matrix: vec![f16_f32],
            ..adapter("NVIDIA H100 80GB HBM3", 0x10de, false)
        };
        let t = ModuleTarget::for_adapter(&vulkan, &embedded());
        assert_eq!(t.profile, listed);
        // Through OpenCL, the same GPU has none: the profile is carried
        // whole without them, and the reason says so.
        let opencl = Adapter {
            api: "opencl".into(),
            ..adapter("NVIDIA H100 80GB HBM3", 0x10de, false)
        };
        let t = ModuleTarget::for_adapter(&opencl, &embedded());
        assert_eq!(t.profile.name, "nvidia_vulkan");
        assert!(t.profile.cooperative_matrix.is_empty());
        assert!(t.reason.contains("cooperative-matrix"), "{}", t.reason);
        let mut m = Module::default();
        t.attach(&mut m);
        assert_eq!(ModuleTarget::of(&m).unwrap(), Some(t));
    }

    #[test]
    fn an_adapter_no_profile_matches_gets_one_built_from_its_limits() {
        let pocl = Adapter {
            api: "opencl".into(),
            compute_units: Some(3),
            ..adapter("cpu-haswell-AMD EPYC", 0x6c636f70, true)
        };
        let t = ModuleTarget::for_adapter(&pocl, &embedded());
        assert_eq!(t.profile.name, "auto");
        assert_eq!(t.profile.compute_units, 3);
        assert_eq!(t.profile.max_workgroup_invocations, Some(512));
        assert!(t.reason.contains("ircc probe"), "{}", t.reason);
        // Carried whole on the module, and read back the same.
        let mut m = Module::default();
        t.attach(&mut m);
        let Some(Attribute::Dict(d)) = m.attrs.get(TARGET_ATTR) else {
            panic!("no target attached");
        };
        assert!(d.contains_key("profile"));
        assert_eq!(ModuleTarget::of(&m).unwrap(), Some(t));
    }

    #[test]
    fn an_embedded_profile_is_named_not_copied() {
        let t = ModuleTarget::named("lavapipe", "--device lavapipe").unwrap();
        let mut m = Module::default();
        t.attach(&mut m);
        let Some(Attribute::Dict(d)) = m.attrs.get(TARGET_ATTR) else {
            panic!("no target attached");
        };
        assert_eq!(d.len(), 2);
        assert_eq!(ModuleTarget::of(&m).unwrap(), Some(t));
        m.attrs
            .insert(TARGET_ATTR.into(), Attribute::String("lavapipe".into()));
        assert!(ModuleTarget::of(&m).unwrap_err().contains("dictionary"));
    }
}
