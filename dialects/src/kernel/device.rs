//! Device profiles: the figures of one GPU that cost models read (compute
//! units, subgroup size, caches and their lines, bandwidths, peak
//! arithmetic, texture support), from `spec/devices/NAME.toml` (embedded).
//! Each figure in a file says where it comes from; a figure no source gave
//! is absent and listed under `unknown`, so a reader knows it is missing
//! rather than zero. `spec/targets/webgpu.toml` keeps the portable limits
//! kernels are built to; a profile describes one device.

use serde::{Deserialize, Serialize};

use super::module_target::Adapter;

/// The embedded profiles, by name.
pub const PROFILES: [(&str, &str); 8] = [
    (
        "adreno640",
        include_str!("../../../spec/devices/adreno640.toml"),
    ),
    (
        "adreno740",
        include_str!("../../../spec/devices/adreno740.toml"),
    ),
    (
        "lavapipe",
        include_str!("../../../spec/devices/lavapipe.toml"),
    ),
    (
        "lavapipe_probed",
        include_str!("../../../spec/devices/lavapipe_probed.toml"),
    ),
    (
        "mali_g76",
        include_str!("../../../spec/devices/mali_g76.toml"),
    ),
    (
        "nvidia_h100_probed",
        include_str!("../../../spec/devices/nvidia_h100_probed.toml"),
    ),
    (
        "nvidia_vulkan",
        include_str!("../../../spec/devices/nvidia_vulkan.toml"),
    ),
    ("webgpu", include_str!("../../../spec/devices/webgpu.toml")),
];

/// See `spec/devices/*.toml` for the source of each figure.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    pub name: String,
    pub vendor: String,
    pub compute_units: u32,
    pub alus_per_unit: Option<u32>,
    /// The smallest subgroup (warp, wave) the device runs.
    pub subgroup_size: u32,
    pub max_workgroup_invocations: Option<u32>,
    /// 32-bit registers per compute unit.
    pub registers_per_unit: Option<u32>,
    pub l1_bytes: Option<u64>,
    pub l1_line_bytes: Option<u32>,
    /// Whether buffer reads go through L1; on Adreno only textures do
    /// (Romou's Table 1 prunes buffers where "L1 cache is for texture only").
    pub l1_serves_buffers: bool,
    /// Whether the ALUs take a scalar operand of vector arithmetic as it
    /// is (Romou's `autobroadcast`, §4.1); otherwise kernels splat it.
    pub autobroadcast: bool,
    pub l2_bytes: Option<u64>,
    pub l2_line_bytes: Option<u32>,
    pub local_memory_bytes: Option<u64>,
    /// The load width, in 32-bit words, of the best cache bandwidth:
    /// Romou's Table 1 prunes kernels that load in other widths.
    pub load_width: Option<u32>,
    pub memory_bandwidth_gbs: f64,
    pub texture_bandwidth_gbs: Option<f64>,
    pub peak_f32_gflops: Option<f64>,
    pub peak_f16_gflops: Option<f64>,
    pub max_texture_extent: Option<u32>,
    /// The storage buffers one kernel may bind (WebGPU's
    /// maxStorageBuffersPerShaderStage, Vulkan's
    /// maxPerStageDescriptorStorageBuffers): graph.fuse keeps each group
    /// within it, where it is known, as well as within the target's
    /// `max_kernel_buffers`.
    pub max_storage_buffers: Option<u32>,
    /// Texel formats kernels may read and write (`rgba32f`, `rgba16f`).
    pub texture_formats: Vec<String>,
    /// The optional figures no source gave.
    pub unknown: Vec<String>,
    /// The cooperative-matrix multiply-adds the device runs on matrix
    /// units (Vulkan's `VK_KHR_cooperative_matrix` configurations, as
    /// `ircc probe` lists them); none where it has no matrix units.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cooperative_matrix: Vec<CooperativeMatrix>,
    /// The adapters `--device auto` chooses this profile for; a profile
    /// without one (a probed record) is only chosen by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<AdapterPattern>,
}

/// One cooperative-matrix multiply-add the device runs: `m x k` times
/// `k x n` operands of `operands`, accumulated in `accumulator`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CooperativeMatrix {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// `f16` or `f32`.
    pub operands: String,
    /// `f16` or `f32`.
    pub accumulator: String,
    /// The matrix units' peak in this configuration, where a source gives
    /// it (ircc bench's roofline report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_gflops: Option<f64>,
}

impl CooperativeMatrix {
    /// The square `side` configuration of f16 operands accumulated in f32,
    /// the one the cooperative product template uses.
    pub fn f16_f32(side: u32) -> CooperativeMatrix {
        CooperativeMatrix {
            m: side,
            n: side,
            k: side,
            operands: "f16".into(),
            accumulator: "f32".into(),
            peak_gflops: None,
        }
    }

    /// Whether `self` and `other` are the same multiply (whatever peak
    /// each records).
    pub fn same_shape(&self, other: &CooperativeMatrix) -> bool {
        (self.m, self.n, self.k, &self.operands, &self.accumulator)
            == (
                other.m,
                other.n,
                other.k,
                &other.operands,
                &other.accumulator,
            )
    }
}

/// Which adapters a profile describes: its vendor's PCI ID (Vulkan's and
/// OpenCL's `vendorID`), and where given, a part of the adapter's name
/// (any of `names`, compared without case).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AdapterPattern {
    pub vendor_id: Option<u32>,
    #[serde(default)]
    pub names: Vec<String>,
}

impl AdapterPattern {
    /// How closely `adapter` matches: `None` where it does not, else the
    /// number of things that matched (a name beats a vendor alone).
    pub fn matches(&self, adapter: &Adapter) -> Option<u32> {
        let mut score = 0;
        if let Some(vendor) = self.vendor_id {
            if vendor != adapter.vendor_id {
                return None;
            }
            score += 1;
        }
        if !self.names.is_empty() {
            let name = adapter.name.to_lowercase();
            if !self.names.iter().any(|n| name.contains(&n.to_lowercase())) {
                return None;
            }
            score += 2;
        }
        (score > 0).then_some(score)
    }
}

/// The optional figures, with whether a profile has each.
fn optional_figures(p: &DeviceProfile) -> [(&'static str, bool); 15] {
    [
        ("alus_per_unit", p.alus_per_unit.is_some()),
        (
            "max_workgroup_invocations",
            p.max_workgroup_invocations.is_some(),
        ),
        ("registers_per_unit", p.registers_per_unit.is_some()),
        ("l1_bytes", p.l1_bytes.is_some()),
        ("l1_line_bytes", p.l1_line_bytes.is_some()),
        ("l2_bytes", p.l2_bytes.is_some()),
        ("l2_line_bytes", p.l2_line_bytes.is_some()),
        ("local_memory_bytes", p.local_memory_bytes.is_some()),
        ("load_width", p.load_width.is_some()),
        ("texture_bandwidth_gbs", p.texture_bandwidth_gbs.is_some()),
        ("peak_f32_gflops", p.peak_f32_gflops.is_some()),
        ("peak_f16_gflops", p.peak_f16_gflops.is_some()),
        ("max_texture_extent", p.max_texture_extent.is_some()),
        ("max_storage_buffers", p.max_storage_buffers.is_some()),
        ("texture_formats", !p.texture_formats.is_empty()),
    ]
}

impl DeviceProfile {
    /// Reads a profile, checking that `unknown` names exactly the optional
    /// figures it lacks and that every figure is positive and finite.
    pub fn parse(text: &str) -> Result<DeviceProfile, String> {
        let p: DeviceProfile =
            toml::from_str(text).map_err(|e| format!("invalid device profile: {e}"))?;
        p.checked()
    }

    /// The profile if its figures are consistent: `unknown` names exactly
    /// the optional figures it lacks, and every figure is positive.
    pub fn checked(self) -> Result<DeviceProfile, String> {
        let p = self;
        if let Some(a) = &p.adapter
            && (a.vendor_id.is_none() && a.names.is_empty() || a.names.iter().any(String::is_empty))
        {
            return Err(format!(
                "device profile '{}': [adapter] needs a vendor_id or names, none of them empty (it would match no adapter, or every one)",
                p.name
            ));
        }
        if let Some(c) = p.cooperative_matrix.iter().find(|c| {
            c.m == 0
                || c.n == 0
                || c.k == 0
                || ![&c.operands, &c.accumulator]
                    .iter()
                    .all(|t| matches!(t.as_str(), "f16" | "f32"))
        }) {
            return Err(format!(
                "device profile '{}': a cooperative_matrix needs positive m, n, k and operands and accumulator of f16 or f32, not {c:?}",
                p.name
            ));
        }
        for (field, present) in optional_figures(&p) {
            let listed = p.unknown.iter().any(|u| u == field);
            if present == listed {
                return Err(format!(
                    "device profile '{}': '{field}' is {} but {} in 'unknown'",
                    p.name,
                    if present { "given" } else { "missing" },
                    if listed { "listed" } else { "not listed" }
                ));
            }
        }
        if let Some(u) = p
            .unknown
            .iter()
            .find(|u| !optional_figures(&p).iter().any(|(f, _)| f == u))
        {
            return Err(format!(
                "device profile '{}': 'unknown' lists '{u}', which is not an optional figure",
                p.name
            ));
        }
        let counts = [
            Some(p.compute_units as u64),
            Some(p.subgroup_size as u64),
            p.alus_per_unit.map(u64::from),
            p.max_workgroup_invocations.map(u64::from),
            p.registers_per_unit.map(u64::from),
            p.l1_bytes,
            p.l1_line_bytes.map(u64::from),
            p.l2_bytes,
            p.l2_line_bytes.map(u64::from),
            p.local_memory_bytes,
            p.load_width.map(u64::from),
            p.max_texture_extent.map(u64::from),
            p.max_storage_buffers.map(u64::from),
        ];
        let rates = [
            Some(p.memory_bandwidth_gbs),
            p.texture_bandwidth_gbs,
            p.peak_f32_gflops,
            p.peak_f16_gflops,
        ];
        if counts.iter().flatten().any(|&c| c == 0)
            || rates.iter().flatten().any(|&r| !(r.is_finite() && r > 0.0))
        {
            return Err(format!(
                "device profile '{}': every figure must be positive and finite",
                p.name
            ));
        }
        Ok(p)
    }

    /// The embedded profile called `name`, or, where `name` ends in
    /// `.toml`, the profile in that file (`--spec-dir`'s
    /// `devices/NAME.toml`), read by `files::read_spec_file`.
    pub fn named(name: &str) -> Result<DeviceProfile, String> {
        if name.ends_with(".toml") {
            let text = ircc_core::files::read_spec_file(name)?;
            return DeviceProfile::parse(&text).map_err(|e| format!("{name}: {e}"));
        }
        let (_, text) = PROFILES.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            let known: Vec<&str> = PROFILES.iter().map(|(n, _)| *n).collect();
            format!("unknown device '{name}' (known: {})", known.join(", "))
        })?;
        DeviceProfile::parse(text)
    }
}

/// The embedded profiles as a table, one device a line (`ircc
/// --list-devices`); `-` marks a figure no source gave.
pub fn profiles_table() -> Result<String, String> {
    let mut out = format!(
        "{:<19} {:<9} {:>5} {:>8} {:>8} {:>10} {:>9} {:>10} {:>11} {:>9}\n",
        "device",
        "vendor",
        "units",
        "subgroup",
        "L1 KiB",
        "L1 buffers",
        "DRAM GB/s",
        "tex GB/s",
        "f32 GFLOPS",
        "max tex"
    );
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    for (name, _) in PROFILES {
        let p = DeviceProfile::named(name)?;
        out += &format!(
            "{:<19} {:<9} {:>5} {:>8} {:>8} {:>10} {:>9} {:>10} {:>11} {:>9}\n",
            p.name,
            p.vendor,
            p.compute_units,
            p.subgroup_size,
            or_dash(p.l1_bytes.map(|b| format!("{}", b as f64 / 1024.0))),
            if p.l1_serves_buffers { "yes" } else { "no" },
            p.memory_bandwidth_gbs,
            or_dash(p.texture_bandwidth_gbs.map(|b| b.to_string())),
            or_dash(p.peak_f32_gflops.map(|g| g.to_string())),
            or_dash(p.max_texture_extent.map(|e| e.to_string())),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_profile_parses_under_its_own_name() {
        for (name, _) in PROFILES {
            let p = DeviceProfile::named(name).unwrap();
            assert_eq!(p.name, name);
        }
        assert!(
            DeviceProfile::named("adreno9000")
                .unwrap_err()
                .contains("known: adreno640")
        );
    }

    #[test]
    fn an_adapter_pattern_must_name_something() {
        let text = |adapter: &str| {
            let base = PROFILES.iter().find(|(n, _)| *n == "lavapipe").unwrap().1;
            let cut = base.find("[adapter]").unwrap();
            format!("{}{adapter}", &base[..cut])
        };
        assert!(DeviceProfile::parse(&text("[adapter]\nvendor_id = 1\n")).is_ok());
        for bad in ["[adapter]\n", "[adapter]\nnames = [\"\"]\n"] {
            let err = DeviceProfile::parse(&text(bad)).unwrap_err();
            assert!(err.contains("needs a vendor_id or names"), "{err}");
        }
    }

    #[test]
    fn the_papers_figures_are_the_ones_read() {
        // Romou Table 2 and §3.1; SmartMem §4.6.
        let a640 = DeviceProfile::named("adreno640").unwrap();
        assert_eq!((a640.compute_units, a640.alus_per_unit), (2, Some(384)));
        assert!(!a640.l1_serves_buffers);
        let mali = DeviceProfile::named("mali_g76").unwrap();
        assert_eq!((mali.subgroup_size, mali.peak_f32_gflops), (8, Some(190.0)));
        let a740 = DeviceProfile::named("adreno740").unwrap();
        assert_eq!(a740.texture_bandwidth_gbs, Some(511.0));
    }

    #[test]
    fn unknown_must_name_exactly_the_missing_figures() {
        let base = DeviceProfile::named("adreno640").unwrap();
        let text = |unknown: &str, extra: &str| {
            format!(
                "name = \"x\"\nvendor = \"v\"\ncompute_units = 1\nsubgroup_size = 8\nl1_serves_buffers = true\nautobroadcast = true\nmemory_bandwidth_gbs = 1.0\ntexture_formats = [\"rgba32f\"]\n{extra}unknown = [{unknown}]\n"
            )
        };
        let all_missing: Vec<String> = optional_figures(&base)
            .iter()
            .filter(|(f, _)| *f != "texture_formats")
            .map(|(f, _)| format!("\"{f}\""))
            .collect();
        assert!(DeviceProfile::parse(&text(&all_missing.join(", "), "")).is_ok());
        let err = DeviceProfile::parse(&text("", "")).unwrap_err();
        assert!(
            err.contains("'alus_per_unit' is missing but not listed"),
            "{err}"
        );
        let err = DeviceProfile::parse(&text(&all_missing.join(", "), "alus_per_unit = 4\n"))
            .unwrap_err();
        assert!(err.contains("'alus_per_unit' is given but listed"), "{err}");
    }
}
