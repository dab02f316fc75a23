//! The target description: the device limits and template tile sizes that
//! kernel lowering, the kernel verifier and the backends read, from
//! `spec/targets/webgpu.toml` (embedded), so no template or printer keeps a
//! device constant of its own.

use std::sync::OnceLock;

use serde::Deserialize;

pub const WEBGPU_SPEC: &str = include_str!("../../../spec/targets/webgpu.toml");

/// See `spec/targets/webgpu.toml` for what each field means.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub name: String,
    pub max_workgroup_invocations: i64,
    pub max_workgroups_per_dimension: i64,
    pub max_texture_extent: i64,
    pub max_workgroup_storage_bytes: i64,
    pub max_kernel_buffers: i64,
    pub storage_offset_alignment: u64,
    pub elementwise_workgroup: i64,
    pub nms_workgroup: i64,
    pub row_max_threads: i64,
    pub matmul_workgroup: i64,
    pub matmul_tile_words: i64,
    pub matmul_max_register_tile: i64,
    pub matmul_min_workgroups: i64,
    pub matmul_workgroups_per_unit: i64,
    pub matmul_split_min_steps: i64,
    pub matmul_tuned_max_register_words: i64,
    pub matmul_tuned_max_k_step: i64,
    pub matmul_tuned_max_splits: i64,
    pub attention_max_register_words: i64,
    pub attention_unit_invocations: i64,
    pub attention_rows_min_keys: i64,
    pub attention_max_key_lanes: i64,
    pub attention_rows_queries: i64,
    pub attention_rows_max_threads: i64,
    pub attention_rows_tile_keys: i64,
    pub attention_load_batch: i64,
    pub attention_read_ahead_words: i64,
    pub attention_split_below: i64,
    pub attention_split_workgroups_per_unit: i64,
    pub attention_split_min_tiles: i64,
    pub attention_gpu_least_splits: i64,
    pub attention_query_tile: i64,
    pub attention_key_tile: i64,
    pub attention_max_columns: i64,
    pub tanh_input_clamp: f64,
}

impl Target {
    /// Reads a target description.
    pub fn parse(text: &str) -> Result<Target, String> {
        toml::from_str(text).map_err(|e| format!("invalid target description: {e}"))
    }

    /// The default target, every WebGPU device.
    pub fn webgpu() -> &'static Target {
        static TARGET: OnceLock<Target> = OnceLock::new();
        TARGET.get_or_init(|| {
            // The embedded file is part of the build; a test parses it.
            Target::parse(WEBGPU_SPEC).unwrap_or_else(|e| panic!("spec/targets/webgpu.toml: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_target_parses_and_fits_the_templates() {
        let t = Target::parse(WEBGPU_SPEC).unwrap();
        assert_eq!(t.max_workgroups_per_dimension, 65535);
        assert!(t.elementwise_workgroup <= t.max_workgroup_invocations);
        assert!(t.nms_workgroup <= t.max_workgroup_invocations);
        assert!(
            t.nms_workgroup >= 3,
            "the first three invocations clear the verdict flags"
        );
        assert!(t.row_max_threads <= t.max_workgroup_invocations);
        assert!(t.matmul_workgroup * t.matmul_workgroup <= t.max_workgroup_invocations);
        assert!(t.attention_query_tile * t.attention_key_tile <= t.max_workgroup_invocations);
        assert_eq!(t.attention_key_tile % 4, 0, "keys are read four at a time");
        assert!(t.attention_rows_max_threads <= t.max_workgroup_invocations);
        assert!(t.attention_rows_queries <= t.attention_rows_max_threads);
        let lanes = t.attention_max_key_lanes;
        assert!(lanes >= 1 && lanes.count_ones() == 1, "lanes halve to one");
        assert_eq!(t.attention_rows_max_threads % lanes, 0);
        assert_eq!(t.attention_rows_tile_keys % (4 * lanes), 0);
        assert!(t.attention_load_batch >= 1);
        assert!(t.attention_split_below <= t.attention_split_workgroups_per_unit);
        assert!(t.attention_split_min_tiles >= 1);
        assert!(t.attention_gpu_least_splits >= 1);
    }
}
