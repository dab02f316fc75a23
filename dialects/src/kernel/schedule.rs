//! A compute op's schedule: the kernel template `kernel.schedule` chose
//! for it and that template's parameters, as the discardable attribute
//! `kernel.schedule` on the op (a fused group or a lone graph op), the way
//! IREE's strategy pass sets `lowering_config` on each dispatch. The
//! texture-level passes read whether the template writes texels;
//! `kernel.lower` reads the rest and decides nothing itself.
//!
//! ```text
//! %y = graph.fused ... {kernel.schedule = {template = "matmul", workgroup = array<i64: 16, 16>,
//!        register_tile = array<i64: 4, 4>, k_step = 8, splits = 1, local_memory = true,
//!        sum_in_consumers = false, tuned = false}}
//! ```

use ircc_core::{Attribute, Attributes, ElemType, Module, OpId};

/// The attribute holding an op's schedule.
pub const SCHEDULE_ATTR: &str = "kernel.schedule";

/// The module attribute holding the float type kernels store and compute
/// in (`f32` or `f16`), which `kernel.schedule` sets.
pub const PRECISION_ATTR: &str = "kernel.precision";

/// The tiled product's parameters: workgroups of `workgroup` (x, y)
/// invocations, each computing a `register_tile` (rows, columns) block,
/// K walked `k_step` at a time, `splits` workgroups sharing an output tile
/// (split-K), operand tiles shared through workgroup memory or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulSchedule {
    pub workgroup: [i64; 2],
    pub register_tile: [i64; 2],
    pub k_step: i64,
    pub splits: i64,
    pub local_memory: bool,
    /// Whether the kernels reading the product sum its partials (where
    /// split) instead of a kernel of its own.
    pub sum_in_consumers: bool,
    /// Whether a tuning database gave the parameters.
    pub tuned: bool,
    /// Whether the kernel normalizes the rows of its A itself (a
    /// layer_norm fused in as its prologue: it computes their moments
    /// before walking K); otherwise a row kernel of its own does, first.
    /// Printed only where set.
    pub normalizes: bool,
}

/// The cooperative-matrix product: workgroups of `subgroups` (rows,
/// columns) subgroups of `subgroup_size` invocations, each computing
/// `matrices` (rows, columns) matrices of `side` x `side` results on the
/// matrix units from f16 operands, accumulating in f32; K walked `k_step`
/// at a time through operand tiles in workgroup memory, and split over
/// `splits` workgroups a tile as the tiled template's is (its partial
/// products summed by a kernel of their own, or by the product's readers
/// where `sum_in_consumers`). `splits` and `sum_in_consumers` are printed
/// only where K is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CooperativeSchedule {
    pub subgroups: [i64; 2],
    pub matrices: [i64; 2],
    pub side: i64,
    pub k_step: i64,
    pub subgroup_size: i64,
    pub splits: i64,
    pub sum_in_consumers: bool,
}

impl CooperativeSchedule {
    /// The workgroup's tile of results: (rows, columns).
    pub fn tile(&self) -> [i64; 2] {
        [
            self.subgroups[0] * self.matrices[0] * self.side,
            self.subgroups[1] * self.matrices[1] * self.side,
        ]
    }

    pub fn invocations(&self) -> i64 {
        self.subgroups[0] * self.subgroups[1] * self.subgroup_size
    }
}

/// Fused attention's register template: workgroups of `rows` queries by
/// `lanes` invocations, key tiles of `keys`, a block's tiles split over
/// `splits` workgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionRowsSchedule {
    pub rows: i64,
    pub lanes: i64,
    pub keys: i64,
    pub splits: i64,
}

/// Fused attention on the matrix units: workgroups of `subgroups`
/// subgroups of `subgroup_size` invocations, each subgroup taking `side`
/// queries of the block, multiplying `side` x `side` f16 matrices into
/// f32 (scores, then weights times values) over key tiles of `keys`,
/// each tile read into registers while the one before is computed
/// (`read_ahead`) or when its turn comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionCooperativeSchedule {
    pub subgroups: i64,
    pub keys: i64,
    pub side: i64,
    pub subgroup_size: i64,
    pub read_ahead: bool,
}

impl AttentionCooperativeSchedule {
    /// The queries of a workgroup's block.
    pub fn queries(&self) -> i64 {
        self.subgroups * self.side
    }

    pub fn invocations(&self) -> i64 {
        self.subgroups * self.subgroup_size
    }
}

/// A depthwise convolution's blocks: `channels` x `rows` x `columns`
/// outputs a workgroup, an invocation each, its input window staged in
/// workgroup memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthwiseSchedule {
    pub channels: i64,
    pub rows: i64,
    pub columns: i64,
}

impl DepthwiseSchedule {
    pub fn invocations(&self) -> i64 {
        self.channels * self.rows * self.columns
    }
}

/// A grouped convolution's register blocks: each invocation computes
/// `channels` neighbouring output channels of one group at `columns`
/// neighbouring output columns of one row, reading each input word once
/// for all of them; workgroups of `invocations` along the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupedSchedule {
    pub channels: i64,
    pub columns: i64,
    pub invocations: i64,
}

/// A reduction whose kept axis is the one its input is stored along
/// (XLA's column reduction): `rows` rows a workgroup, neighbouring
/// invocations taking neighbouring rows so that their reads coalesce,
/// and `slices` invocations sharing each row, their partials meeting
/// through workgroup memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnSchedule {
    pub rows: i64,
    pub slices: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// An invocation per output element (or texel).
    Elementwise,
    /// A softmax, normalization or reduction, its rows shared out over
    /// workgroups (the row template).
    Row,
    /// A reduction's rows across neighbouring invocations (the row
    /// template's column form).
    Column(ColumnSchedule),
    Matmul(MatmulSchedule),
    MatmulCooperative(CooperativeSchedule),
    AttentionRows(AttentionRowsSchedule),
    /// Fused attention, an invocation per query and key of a tile.
    AttentionTiled,
    AttentionCooperative(AttentionCooperativeSchedule),
    ConvDepthwise(DepthwiseSchedule),
    ConvGrouped(GroupedSchedule),
    NonMaxSuppression,
}

impl Schedule {
    pub fn template(&self) -> &'static str {
        match self {
            Schedule::Elementwise => "elementwise",
            Schedule::Row => "row",
            Schedule::Column(_) => "column",
            Schedule::Matmul(_) => "matmul",
            Schedule::MatmulCooperative(_) => "matmul_cooperative",
            Schedule::AttentionRows(_) => "attention_rows",
            Schedule::AttentionTiled => "attention_tiled",
            Schedule::AttentionCooperative(_) => "attention_cooperative",
            Schedule::ConvDepthwise(_) => "conv_depthwise",
            Schedule::ConvGrouped(_) => "conv_grouped",
            Schedule::NonMaxSuppression => "nms",
        }
    }

    pub fn to_attr(&self) -> Attribute {
        let mut d = Attributes::new();
        d.insert("template".into(), Attribute::String(self.template().into()));
        let int = |d: &mut Attributes, k: &str, v: i64| {
            d.insert(k.into(), Attribute::i64(v));
        };
        match self {
            Schedule::Matmul(s) => {
                d.insert(
                    "workgroup".into(),
                    Attribute::DenseI64Array(s.workgroup.to_vec()),
                );
                d.insert(
                    "register_tile".into(),
                    Attribute::DenseI64Array(s.register_tile.to_vec()),
                );
                int(&mut d, "k_step", s.k_step);
                int(&mut d, "splits", s.splits);
                d.insert("local_memory".into(), Attribute::Bool(s.local_memory));
                d.insert(
                    "sum_in_consumers".into(),
                    Attribute::Bool(s.sum_in_consumers),
                );
                d.insert("tuned".into(), Attribute::Bool(s.tuned));
                if s.normalizes {
                    d.insert("normalizes".into(), Attribute::Bool(true));
                }
            }
            Schedule::MatmulCooperative(s) => {
                d.insert(
                    "subgroups".into(),
                    Attribute::DenseI64Array(s.subgroups.to_vec()),
                );
                d.insert(
                    "matrices".into(),
                    Attribute::DenseI64Array(s.matrices.to_vec()),
                );
                int(&mut d, "side", s.side);
                int(&mut d, "k_step", s.k_step);
                int(&mut d, "subgroup_size", s.subgroup_size);
                if s.splits > 1 {
                    int(&mut d, "splits", s.splits);
                    d.insert(
                        "sum_in_consumers".into(),
                        Attribute::Bool(s.sum_in_consumers),
                    );
                }
            }
            Schedule::AttentionRows(s) => {
                int(&mut d, "rows", s.rows);
                int(&mut d, "lanes", s.lanes);
                int(&mut d, "keys", s.keys);
                int(&mut d, "splits", s.splits);
            }
            Schedule::AttentionCooperative(s) => {
                int(&mut d, "subgroups", s.subgroups);
                int(&mut d, "keys", s.keys);
                int(&mut d, "side", s.side);
                int(&mut d, "subgroup_size", s.subgroup_size);
                d.insert("read_ahead".into(), Attribute::Bool(s.read_ahead));
            }
            Schedule::Column(s) => {
                int(&mut d, "rows", s.rows);
                int(&mut d, "slices", s.slices);
            }
            Schedule::ConvDepthwise(s) => {
                int(&mut d, "channels", s.channels);
                int(&mut d, "rows", s.rows);
                int(&mut d, "columns", s.columns);
            }
            Schedule::ConvGrouped(s) => {
                int(&mut d, "channels", s.channels);
                int(&mut d, "columns", s.columns);
                int(&mut d, "invocations", s.invocations);
            }
            _ => {}
        }
        Attribute::Dict(d)
    }

    pub fn from_attr(a: &Attribute) -> Result<Schedule, String> {
        let Attribute::Dict(d) = a else {
            return Err("not a dictionary {template = NAME, ...}".into());
        };
        let template = d
            .get("template")
            .and_then(Attribute::as_str)
            .ok_or("no string 'template'")?;
        let known: &[&str] = match template {
            "matmul" => &[
                "workgroup",
                "register_tile",
                "k_step",
                "splits",
                "local_memory",
                "sum_in_consumers",
                "tuned",
                "normalizes",
            ],
            "matmul_cooperative" => &[
                "subgroups",
                "matrices",
                "side",
                "k_step",
                "subgroup_size",
                "splits",
                "sum_in_consumers",
            ],
            "attention_rows" => &["rows", "lanes", "keys", "splits"],
            "attention_cooperative" => {
                &["subgroups", "keys", "side", "subgroup_size", "read_ahead"]
            }
            "conv_depthwise" => &["channels", "rows", "columns"],
            "conv_grouped" => &["channels", "columns", "invocations"],
            "column" => &["rows", "slices"],
            _ => &[],
        };
        if let Some(k) = d
            .keys()
            .find(|k| *k != "template" && !known.contains(&k.as_str()))
        {
            return Err(format!("'{k}' is not a parameter of template '{template}'"));
        }
        let int = |k: &str| {
            d.get(k)
                .and_then(Attribute::as_i64)
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("template '{template}' needs a positive integer '{k}'"))
        };
        let pair = |k: &str| -> Result<[i64; 2], String> {
            match d.get(k).and_then(Attribute::as_i64_array).as_deref() {
                Some(&[a, b]) if a > 0 && b > 0 => Ok([a, b]),
                _ => Err(format!(
                    "template '{template}' needs '{k}' as array<i64: A, B>, both positive"
                )),
            }
        };
        let flag = |k: &str| match d.get(k) {
            Some(Attribute::Bool(b)) => Ok(*b),
            _ => Err(format!("template '{template}' needs a bool '{k}'")),
        };
        Ok(match template {
            "elementwise" => Schedule::Elementwise,
            "row" => Schedule::Row,
            "attention_tiled" => Schedule::AttentionTiled,
            "nms" => Schedule::NonMaxSuppression,
            "matmul" => Schedule::Matmul(MatmulSchedule {
                workgroup: pair("workgroup")?,
                register_tile: pair("register_tile")?,
                k_step: int("k_step")?,
                splits: int("splits")?,
                local_memory: flag("local_memory")?,
                sum_in_consumers: flag("sum_in_consumers")?,
                normalizes: d.contains_key("normalizes") && flag("normalizes")?,
                tuned: flag("tuned")?,
            }),
            "matmul_cooperative" => {
                let splits = if d.contains_key("splits") {
                    int("splits")?
                } else {
                    1
                };
                Schedule::MatmulCooperative(CooperativeSchedule {
                    subgroups: pair("subgroups")?,
                    matrices: pair("matrices")?,
                    side: int("side")?,
                    k_step: int("k_step")?,
                    subgroup_size: int("subgroup_size")?,
                    splits,
                    // Readers sum partial products only where K is split.
                    sum_in_consumers: splits > 1
                        && d.contains_key("sum_in_consumers")
                        && flag("sum_in_consumers")?,
                })
            }
            "attention_rows" => Schedule::AttentionRows(AttentionRowsSchedule {
                rows: int("rows")?,
                lanes: int("lanes")?,
                keys: int("keys")?,
                splits: int("splits")?,
            }),
            "attention_cooperative" => {
                Schedule::AttentionCooperative(AttentionCooperativeSchedule {
                    subgroups: int("subgroups")?,
                    keys: int("keys")?,
                    side: int("side")?,
                    subgroup_size: int("subgroup_size")?,
                    read_ahead: flag("read_ahead")?,
                })
            }
            "column" => Schedule::Column(ColumnSchedule {
                rows: int("rows")?,
                slices: int("slices")?,
            }),
            "conv_depthwise" => Schedule::ConvDepthwise(DepthwiseSchedule {
                channels: int("channels")?,
                rows: int("rows")?,
                columns: int("columns")?,
            }),
            "conv_grouped" => Schedule::ConvGrouped(GroupedSchedule {
                channels: int("channels")?,
                columns: int("columns")?,
                invocations: int("invocations")?,
            }),
            other => {
                return Err(format!(
                    "unknown template '{other}' (known: elementwise, row, column, matmul, matmul_cooperative, attention_rows, attention_tiled, attention_cooperative, conv_depthwise, conv_grouped, nms)"
                ));
            }
        })
    }

    /// The schedule of op `op`; `None` where it has none.
    pub fn of(m: &Module, op: OpId) -> Result<Option<Schedule>, String> {
        m.op(op)
            .attrs
            .get(SCHEDULE_ATTR)
            .map(|a| Schedule::from_attr(a).map_err(|e| format!("{SCHEDULE_ATTR}: {e}")))
            .transpose()
    }

    pub fn attach(&self, m: &mut Module, op: OpId) {
        m.op_mut(op)
            .attrs
            .insert(SCHEDULE_ATTR.into(), self.to_attr());
    }
}

/// The float type kernels of `m` store and compute in: what
/// `kernel.schedule` recorded, f32 where it recorded none.
pub fn precision(m: &Module) -> Result<ElemType, String> {
    match m.attrs.get(PRECISION_ATTR).map(|a| a.as_str()) {
        None | Some(Some("f32")) => Ok(ElemType::F32),
        Some(Some("f16")) => Ok(ElemType::F16),
        _ => Err(format!("{PRECISION_ATTR}: not \"f32\" or \"f16\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_read_back_as_written_and_bad_ones_are_named() {
        let schedules = [
            Schedule::Elementwise,
            Schedule::Row,
            Schedule::AttentionTiled,
            Schedule::NonMaxSuppression,
            Schedule::Matmul(MatmulSchedule {
                workgroup: [16, 8],
                register_tile: [4, 4],
                k_step: 8,
                splits: 3,
                local_memory: true,
                sum_in_consumers: false,
                tuned: true,
                normalizes: true,
            }),
            Schedule::AttentionRows(AttentionRowsSchedule {
                rows: 16,
                lanes: 2,
                keys: 64,
                splits: 1,
            }),
            Schedule::MatmulCooperative(CooperativeSchedule {
                subgroups: [2, 2],
                matrices: [2, 1],
                side: 16,
                k_step: 32,
                subgroup_size: 32,
                splits: 1,
                sum_in_consumers: false,
            }),
            Schedule::MatmulCooperative(CooperativeSchedule {
                subgroups: [2, 2],
                matrices: [2, 2],
                side: 16,
                k_step: 64,
                subgroup_size: 32,
                splits: 4,
                sum_in_consumers: true,
            }),
            Schedule::AttentionCooperative(AttentionCooperativeSchedule {
                subgroups: 4,
                keys: 64,
                side: 16,
                subgroup_size: 32,
                read_ahead: true,
            }),
            Schedule::ConvDepthwise(DepthwiseSchedule {
                channels: 4,
                rows: 8,
                columns: 8,
            }),
            Schedule::Column(ColumnSchedule {
                rows: 64,
                slices: 4,
            }),
            Schedule::ConvGrouped(GroupedSchedule {
                channels: 4,
                columns: 2,
                invocations: 64,
            }),
        ];
        for s in schedules {
            assert_eq!(Schedule::from_attr(&s.to_attr()), Ok(s));
        }
        let mut d = match Schedule::Row.to_attr() {
            Attribute::Dict(d) => d,
            _ => unreachable!(),
        };
        d.insert("splits".into(), Attribute::i64(2));
        let err = Schedule::from_attr(&Attribute::Dict(d)).unwrap_err();
        assert!(
            err.contains("'splits' is not a parameter of template 'row'"),
            "{err}"
        );
        let mut d = Attributes::new();
        d.insert("template".into(), Attribute::String("matmul".into()));
        let err = Schedule::from_attr(&Attribute::Dict(d)).unwrap_err();
        assert!(err.contains("needs 'workgroup'"), "{err}");
        // A cooperative product's readers sum partials only where K is
        // split, as its printed form says.
        let unsplit = Schedule::MatmulCooperative(CooperativeSchedule {
            subgroups: [2, 2],
            matrices: [1, 1],
            side: 16,
            k_step: 32,
            subgroup_size: 32,
            splits: 1,
            sum_in_consumers: false,
        });
        let Attribute::Dict(mut d) = unsplit.to_attr() else {
            unreachable!()
        };
        d.insert("sum_in_consumers".into(), Attribute::Bool(true));
        assert_eq!(Schedule::from_attr(&Attribute::Dict(d)), Ok(unsplit));
    }
}
