//! What a WGSL plan asks of a WebGPU device beyond what every one gives:
//! the optional features its shaders enable and the limits it needs above
//! the specification's defaults. A bundle records them as `plan.json`'s
//! `webgpu` (so a reader sees before loading it whether a browser's
//! adapter will take it), ircc's reader and `web/ircc.js` both recompute
//! them and refuse a plan that says otherwise, and the browser runtime
//! asks the adapter for exactly these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Access, BufferKind, Plan};

/// The WebGPU specification's default limits that a plan's dispatches and
/// buffers can pass (§ Limits, "default" column): a device gives at least
/// these without being asked. `maxComputeWorkgroupStorageSize` is not
/// here: the kernel verifier keeps every kernel within the target's 16 KiB
/// (`spec/targets/webgpu.toml`), WebGPU's default.
pub const DEFAULT_LIMITS: [(&str, u64); 12] = [
    ("maxStorageBuffersPerShaderStage", 8),
    ("maxStorageTexturesPerShaderStage", 4),
    ("maxSampledTexturesPerShaderStage", 16),
    ("maxBindingsPerBindGroup", 1000),
    ("maxStorageBufferBindingSize", 134_217_728),
    ("maxBufferSize", 268_435_456),
    ("maxTextureDimension2D", 8192),
    ("maxComputeWorkgroupSizeX", 256),
    ("maxComputeWorkgroupSizeY", 256),
    ("maxComputeWorkgroupSizeZ", 64),
    ("maxComputeInvocationsPerWorkgroup", 256),
    ("maxComputeWorkgroupsPerDimension", 65535),
];

/// The WGSL extensions ircc's shaders may enable, and the WebGPU feature
/// each needs; `None` where WebGPU has no such feature (wgpu's cooperative
/// matrices: a browser cannot run such a bundle).
const EXTENSIONS: [(&str, Option<&str>); 3] = [
    ("f16", Some("shader-f16")),
    ("subgroups", Some("subgroups")),
    ("wgpu_cooperative_matrix", None),
];

/// The features (WebGPU's names, sorted) and the limits above the
/// defaults, by name, that a plan needs; `unavailable` names WGSL
/// extensions no WebGPU device has.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebGpuNeeds {
    pub features: Vec<String>,
    pub limits: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}

impl WebGpuNeeds {
    /// What `plan`'s dispatches and buffers, and its `sources` (the WGSL
    /// modules, whose `enable` directives name their extensions), need.
    pub fn of(plan: &Plan, sources: &[(String, String)]) -> WebGpuNeeds {
        let mut needs = WebGpuNeeds::default();
        for (extension, feature) in EXTENSIONS {
            if !sources.iter().any(|(_, text)| enables(text, extension)) {
                continue;
            }
            match feature {
                Some(f) => needs.features.push(f.to_string()),
                None => needs.unavailable.push(extension.to_string()),
            }
        }
        needs.features.sort();
        let most = |values: &mut dyn Iterator<Item = u64>| values.max().unwrap_or(0);
        let ds = &plan.dispatches;
        let bound = |accesses: &[Access]| {
            most(&mut ds.iter().map(|d| {
                d.bindings
                    .iter()
                    .filter(|b| accesses.contains(&b.access))
                    .count() as u64
            }))
        };
        let buffers = || {
            plan.buffers
                .iter()
                .filter(|b| b.kind != BufferKind::Texture)
        };
        let axis = |i: usize| most(&mut ds.iter().map(|d| size_at(&d.workgroup_size, i)));
        let wanted = [
            bound(&[Access::Read, Access::ReadWrite]),
            bound(&[Access::StorageTexture]),
            bound(&[Access::Texture]),
            most(
                &mut ds
                    .iter()
                    .flat_map(|d| d.bindings.iter().map(|b| b.binding as u64 + 1)),
            ),
            most(&mut buffers().map(|b| b.bytes)),
            most(&mut buffers().map(|b| b.bytes).chain([plan.pool_bytes])),
            most(
                &mut plan
                    .buffers
                    .iter()
                    .flat_map(|b| b.texels.into_iter().flatten().map(u64::from)),
            ),
            axis(0),
            axis(1),
            axis(2),
            most(&mut ds.iter().map(|d| {
                (0..3)
                    .map(|i| size_at(&d.workgroup_size, i))
                    .fold(1u64, u64::saturating_mul)
            })),
            most(
                &mut ds
                    .iter()
                    .flat_map(|d| (0..3).map(|i| size_at(&d.workgroups, i))),
            ),
        ];
        for ((name, default), wanted) in DEFAULT_LIMITS.iter().zip(wanted) {
            if wanted > *default {
                needs.limits.insert(name.to_string(), wanted);
            }
        }
        needs
    }

    /// Whether every WebGPU device runs the plan as it is: no feature, no
    /// limit above the defaults.
    pub fn is_none(&self) -> bool {
        self.features.is_empty() && self.limits.is_empty() && self.unavailable.is_empty()
    }
}

/// Whether WGSL `text` has the directive `enable NAME;`, alone or in a list.
fn enables(text: &str, name: &str) -> bool {
    text.lines().any(|line| {
        line.trim()
            .strip_prefix("enable ")
            .and_then(|rest| rest.trim_end().strip_suffix(';'))
            .is_some_and(|list| list.split(',').any(|e| e.trim() == name))
    })
}

/// Axis `i` of a three-axis size (a missing axis is 1, a negative one 0:
/// `Plan::check` refuses both).
fn size_at(size: &[i64], i: usize) -> u64 {
    size.get(i).map_or(1, |&n| u64::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Binding, BufferPlan, Dispatch, Language, PLAN_VERSION};

    fn plan(bindings: usize, workgroups: i64, pool_bytes: u64) -> Plan {
        let buffer = |id: usize| BufferPlan {
            id,
            name: format!("t{id}"),
            kind: BufferKind::Intermediate,
            elem: "f32".into(),
            dtype: "f32".into(),
            shape: vec![1],
            bytes: 4,
            pool_offset: Some(0),
            tensor: None,
            texels: None,
            texel_format: None,
        };
        Plan {
            version: PLAN_VERSION,
            language: Some(Language::Wgsl),
            weights: None,
            precision: "f32".into(),
            target: None,
            webgpu: None,
            pool_bytes,
            buffers: (0..bindings).map(buffer).collect(),
            inputs: vec![],
            outputs: vec![],
            output_names: vec![],
            dispatches: vec![Dispatch {
                kernel: "k".into(),
                shader: Some("k.wgsl".into()),
                entry: Some("main".into()),
                template: "elementwise".into(),
                workgroup_size: vec![64, 1, 1],
                workgroups: vec![workgroups, 1, 1],
                bindings: (0..bindings)
                    .map(|i| Binding {
                        binding: i,
                        buffer: i,
                        access: Access::ReadWrite,
                    })
                    .collect(),
            }],
            sources: vec![],
            constants: Default::default(),
        }
    }

    #[test]
    fn a_plan_within_the_defaults_needs_nothing() {
        let needs = WebGpuNeeds::of(&plan(8, 65535, 1 << 28), &[]);
        assert!(needs.is_none(), "{needs:?}");
    }

    #[test]
    fn limits_past_the_defaults_are_named_with_what_the_plan_needs() {
        let needs = WebGpuNeeds::of(&plan(10, 70000, (1 << 28) + 4), &[]);
        let limits: Vec<(&str, u64)> = needs.limits.iter().map(|(k, &v)| (k.as_str(), v)).collect();
        assert_eq!(
            limits,
            [
                ("maxBufferSize", (1 << 28) + 4),
                ("maxComputeWorkgroupsPerDimension", 70000),
                ("maxStorageBuffersPerShaderStage", 10),
            ]
        );
    }

    #[test]
    fn enabled_extensions_become_features_or_are_named_unavailable() {
        let sources = [
            (
                "a.wgsl".to_string(),
                "enable f16;\nfn main() {}".to_string(),
            ),
            (
                "b.wgsl".to_string(),
                "  enable subgroups, wgpu_cooperative_matrix ;\n// enable nothing;".to_string(),
            ),
        ];
        let needs = WebGpuNeeds::of(&plan(1, 1, 4), &sources);
        assert_eq!(needs.features, ["shader-f16", "subgroups"]);
        assert_eq!(needs.unavailable, ["wgpu_cooperative_matrix"]);
        let none = [(
            "c.wgsl".to_string(),
            "// enable f16;\nfn main() {}".to_string(),
        )];
        assert!(WebGpuNeeds::of(&plan(1, 1, 4), &none).is_none());
    }
}
