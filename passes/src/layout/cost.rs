//! The cost model of layout selection: the time, in nanoseconds, a
//! kernel spends moving a tensor in a layout, from a device profile's
//! bandwidths and cache lines (`spec/devices/`) and the constants of
//! `spec/layout.toml`.
//!
//! - A write stores every byte of the layout once at the buffer bandwidth
//!   (a texture's bytes include the unused lanes of its last texels).
//!   A texture its kernel cannot write (a tiled product's with lanes
//!   along another axis than its columns, a softmax's or layer norm's
//!   with lanes along another axis than its row, a reduction's) costs the
//!   buffer and a copy kernel into the texture besides.
//! - A read along the axis the layout keeps fastest (a buffer's last axis,
//!   a texture's lane axis) fetches each byte once, at the buffer or the
//!   texture bandwidth. A read along a texture's x axis uses one lane of
//!   each texel it fetches (4x). Any other read uses one element of each
//!   cache line it fetches (line / element bytes for a buffer, 4 x line /
//!   texel bytes for a texture), except a buffer read on a device whose L1
//!   serves buffers: neighbouring invocations read the rest of each line
//!   from L1, so it costs what a contiguous read does. Textures win where
//!   SmartMem says they do (Table 2): where only they have a cache of their
//!   own, or more bandwidth.
//! - An extra copy in the wanted layout (policy `extra_copies`) costs
//!   launching its kernel, reading the tensor in its own layout, writing
//!   the copy and reading it.

use ircc_dialects::kernel::{DeviceProfile, Target};
use ircc_dialects::texture::{LANES, TexelFormat};
use serde::Deserialize;

use super::problem::{Choice, Node};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub contiguous_dims: usize,
    pub extra_copies: ExtraCopies,
    pub second_axis_weight: f64,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ExtraCopies {
    WhenCheaper,
    Never,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostConstants {
    pub default_line_bytes: u32,
    pub kernel_launch_ns: f64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutSpec {
    pub policy: Policy,
    pub cost: CostConstants,
}

pub const SPEC: &str = include_str!("../../../spec/layout.toml");

impl LayoutSpec {
    /// The embedded `spec/layout.toml`.
    pub fn load() -> LayoutSpec {
        let spec: LayoutSpec = toml::from_str(SPEC).expect("spec/layout.toml is valid");
        assert!(
            (1..=2).contains(&spec.policy.contiguous_dims),
            "spec/layout.toml: a 2.5D layout keeps one or two axes contiguous"
        );
        spec
    }

    /// What layout.select reads, for `ircc --list-fusion-tables`.
    pub fn render(&self) -> String {
        let p = &self.policy;
        format!(
            "Layout selection (spec/layout.toml):\n  contiguous axes per 2.5D layout: {} (lanes, then x)\n  extra copies: {}\n  weight of a read's second axis: {}\n  cache line where a profile has none: {} B\n  cost of one more kernel: {} ns\n",
            p.contiguous_dims,
            match p.extra_copies {
                ExtraCopies::WhenCheaper => "when-cheaper",
                ExtraCopies::Never => "never",
            },
            p.second_axis_weight,
            self.cost.default_line_bytes,
            self.cost.kernel_launch_ns
        )
    }
}

pub struct CostModel {
    /// The profile's name, for messages.
    pub device: String,
    /// Bytes per nanosecond.
    buffer_bandwidth: f64,
    texture_bandwidth: f64,
    buffer_line: f64,
    texture_line: f64,
    /// The texel format float tensors take, if the device has textures.
    pub format: Option<TexelFormat>,
    pub max_extent: i64,
    pub copies: ExtraCopies,
    launch: f64,
    /// Whether L1 serves buffers: neighbouring invocations then share the
    /// lines a strided read fetches.
    l1_buffers: bool,
}

impl CostModel {
    pub fn new(profile: &DeviceProfile, spec: &LayoutSpec) -> CostModel {
        let default = spec.cost.default_line_bytes;
        let (l1, l2) = (profile.l1_line_bytes, profile.l2_line_bytes);
        let buffer_line = if profile.l1_serves_buffers {
            l1.or(l2)
        } else {
            l2.or(l1)
        };
        let format = profile
            .texture_formats
            .iter()
            .find_map(|f| TexelFormat::from_name(f).filter(|&f| f == TexelFormat::Rgba32f));
        CostModel {
            device: profile.name.clone(),
            buffer_bandwidth: profile.memory_bandwidth_gbs,
            texture_bandwidth: profile
                .texture_bandwidth_gbs
                .unwrap_or(profile.memory_bandwidth_gbs),
            buffer_line: buffer_line.unwrap_or(default) as f64,
            texture_line: l1.unwrap_or(default) as f64,
            format,
            // Kernels are WebGPU's, so its limit holds even where the
            // device's own is larger.
            max_extent: profile
                .max_texture_extent
                .map_or(i64::MAX, i64::from)
                .min(Target::webgpu().max_texture_extent),
            copies: spec.policy.extra_copies,
            launch: spec.cost.kernel_launch_ns,
            l1_buffers: profile.l1_serves_buffers,
        }
    }

    fn texel_bytes(&self) -> f64 {
        self.format.unwrap_or(TexelFormat::Rgba32f).texel_bytes() as f64
    }

    /// Bytes the tensor takes in a layout.
    pub fn bytes(&self, node: &Node, choice: Choice) -> f64 {
        match choice {
            Choice::Buffer => node.shape.iter().product::<i64>() as f64 * node.elem_bytes as f64,
            Choice::Texture { lanes, .. } => {
                let texels: i64 = node
                    .shape
                    .iter()
                    .enumerate()
                    .map(|(a, &d)| {
                        if a == lanes {
                            (d + LANES - 1) / LANES
                        } else {
                            d
                        }
                    })
                    .product();
                texels as f64 * self.texel_bytes()
            }
        }
    }

    /// The axis a layout keeps fastest.
    pub fn fastest(node: &Node, choice: Choice) -> Option<usize> {
        match choice {
            Choice::Buffer => node.shape.len().checked_sub(1),
            Choice::Texture { lanes, .. } => Some(lanes),
        }
    }

    pub fn write(&self, node: &Node, choice: Choice) -> f64 {
        let own = self.bytes(node, choice) / self.buffer_bandwidth;
        if node.writer.writes(choice) {
            return own;
        }
        let buffer = self.bytes(node, Choice::Buffer) / self.buffer_bandwidth;
        own + 2.0 * buffer + self.launch
    }

    /// Reading the tensor in `choice` along `want` (none: no preference).
    pub fn read(&self, node: &Node, choice: Choice, want: Option<usize>) -> f64 {
        match choice {
            Choice::Buffer => {
                let base = self.bytes(node, choice) / self.buffer_bandwidth;
                if want.is_none() || want == Self::fastest(node, choice) || self.l1_buffers {
                    base
                } else {
                    base * (self.buffer_line / node.elem_bytes as f64).max(1.0)
                }
            }
            Choice::Texture { lanes, contiguous } => {
                let base = self.bytes(node, choice) / self.texture_bandwidth;
                match want {
                    None => base,
                    Some(a) if a == lanes => base,
                    Some(a) if a == contiguous => base * LANES as f64,
                    Some(_) => {
                        base * LANES as f64 * (self.texture_line / self.texel_bytes()).max(1.0)
                    }
                }
            }
        }
    }

    /// The layout an extra copy for a read along `want` takes, if copies
    /// are allowed and the node may take it.
    pub fn copy_layout(&self, node: &Node, want: Option<usize>) -> Option<Choice> {
        let a = want?;
        let c = Choice::Texture {
            lanes: a,
            contiguous: a,
        };
        (self.copies == ExtraCopies::WhenCheaper && node.choices.contains(&c)).then_some(c)
    }

    /// A read along `want` of the tensor in `choice`: strided, or through
    /// an extra copy where that costs less. The cost, and the copy's layout
    /// when there is one.
    pub fn best_read(
        &self,
        node: &Node,
        choice: Choice,
        want: Option<usize>,
    ) -> (f64, Option<Choice>) {
        let strided = self.read(node, choice, want);
        let Some(copy) = self.copy_layout(node, want).filter(|&c| c != choice) else {
            return (strided, None);
        };
        let through_copy = self.launch
            + self.read(node, choice, Self::fastest(node, choice))
            + self.bytes(node, copy) / self.buffer_bandwidth
            + self.read(node, copy, want);
        if through_copy < strided {
            (through_copy, Some(copy))
        } else {
            (strided, None)
        }
    }
}
