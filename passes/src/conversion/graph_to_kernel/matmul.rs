//! The tiled matrix product (matmul, gemm, one-group convolution): its
//! configuration — the target's heuristic (`Tiling`) or a tuning
//! database's point of the space (`MatmulConfig`) — and the kernel built
//! from it, with shared operand tiles or direct loads, and split-K;
//! results placed in textures are staged and written as texels.

use ircc_core::{ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind};
use ircc_dialects::kernel::{MatmulSchedule, SCHEDULE_ATTR};
use ircc_dialects::texture::LANES;

use super::lowering::{
    ArgRole, Input, Ix, KernelBuilder, delinearize, guarded, shape_of, short, store_outputs,
    target, tensor_shape,
};
use super::product::{Product, column_axis, product_dims};
use super::prologue::{RowMoments, TileRows, moments_words};
use crate::tuning::prune::KernelFacts;
use crate::tuning::space::{MatmulConfig, ProductShape};
use crate::tuning::{SharedTuning, Tunable};

type R<T> = Result<T, String>;

/// How the matmul template tiles a product: workgroups of
/// `workgroup_rows` by the target's side, each invocation computing a
/// `register_tile` squared block of results, and `splits` workgroups
/// sharing each output tile, each summing its own range of K (split-K).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tiling {
    pub register_tile: i64,
    pub workgroup_rows: i64,
    pub splits: i64,
}

impl Tiling {
    /// The tiling of an `m` x `n` product over `k`, `batches` times, on a
    /// device of `compute_units`. The register tile halves while the grid
    /// has too few workgroups (the target's `matmul_min_workgroups`). Where
    /// even so the grid cannot fill the device and each workgroup would
    /// walk a long K, at least twice `matmul_split_min_steps` steps (Swin's
    /// and ViT's products of 49 or 197 rows), the full register tile is
    /// kept and K is split over enough workgroups to fill it, each taking
    /// at least `matmul_split_min_steps` steps; also where the grid would
    /// be filled only by tiles of one result an invocation. ResNeXt-50's
    /// stage-3 products walk exactly that many, 16 steps (196 rows; K of
    /// 1024 in tiles of one result, of 512 in tiles of four): split with
    /// their partials summed, its f32 run took 1.24 ms on an H200 instead
    /// of 1.38.
    ///
    /// Unless `sum_in_consumers` (the kernels reading the product sum its
    /// partials where they read them), a kernel of its own sums the
    /// partials: a dispatch, so where workgroups half as tall give every
    /// compute unit one (ViT's qkv and first MLP products), the product is
    /// not split but takes those.
    pub fn choose(
        m: i64,
        n: i64,
        k: i64,
        batches: i64,
        compute_units: i64,
        sum_in_consumers: bool,
    ) -> Tiling {
        let t = target();
        let side = t.matmul_workgroup;
        let workgroups = |reg: i64, rows: i64| {
            let (tile_m, tile_n) = (rows * reg, side * reg);
            ((n + tile_n - 1) / tile_n) * ((m + tile_m - 1) / tile_m) * batches
        };
        let steps = |reg: i64| {
            let bk = t.matmul_tile_words / (side * reg);
            (k + bk - 1) / bk
        };
        let mut reg = t.matmul_max_register_tile;
        while reg > 1 && workgroups(reg, side) < t.matmul_min_workgroups {
            reg /= 2;
        }
        let unsplit = Tiling {
            register_tile: reg,
            workgroup_rows: side,
            splits: 1,
        };
        let wanted = compute_units * t.matmul_workgroups_per_unit;
        if workgroups(reg, side) >= wanted || steps(reg) < 2 * t.matmul_split_min_steps {
            return unsplit;
        }
        let full = t.matmul_max_register_tile;
        let tiles = workgroups(full, side).max(1);
        let most = ((wanted + tiles - 1) / tiles)
            .min(steps(full) / t.matmul_split_min_steps)
            .min(t.max_workgroups_per_dimension / batches.max(1));
        // Splits that divide the steps evenly, so that every split takes
        // as many; only worth it where the grid grows beyond the unsplit
        // one (K's steps may have no divisor in range, or a small one), or
        // where the unsplit tile is one result an invocation (a multiply-add
        // for every two words read from workgroup memory) and the split
        // still gives matmul_min_workgroups: Swin-T's stage-3 second MLP
        // product (196 x 1536 x 384) took 44 us so on an H200, 29 split 12
        // ways.
        let splits = match (2..=most).rev().find(|s| steps(full) % s == 0) {
            Some(splits)
                if splits * tiles > workgroups(reg, side)
                    || (reg == 1 && splits * tiles >= t.matmul_min_workgroups) =>
            {
                splits
            }
            _ => return unsplit,
        };
        let half = side / 2;
        if !sum_in_consumers && workgroups(full, half) >= compute_units {
            return Tiling {
                register_tile: full,
                workgroup_rows: half,
                splits: 1,
            };
        }
        Tiling {
            register_tile: full,
            workgroup_rows: side,
            splits,
        }
    }

    /// The template's parameters for this tiling: workgroups of the
    /// target's side (as tall, or `workgroup_rows`), a square register
    /// tile, and K steps whose operand tiles, at the full height, fill the
    /// target's `matmul_tile_words`.
    pub fn config(&self) -> MatmulConfig {
        let side = target().matmul_workgroup;
        MatmulConfig {
            workgroup_x: side,
            workgroup_y: self.workgroup_rows,
            rows: self.register_tile,
            cols: self.register_tile,
            k_step: target().matmul_tile_words / (side * self.register_tile),
            splits: self.splits,
            local_memory: true,
        }
    }
}

/// The signature a tuning database keys a product's kernel by: the
/// anchor, the product's dimensions, its operands' shapes, the anchor's
/// attributes (a convolution's strides and pads, gemm's transposes) and
/// the float type, so that only kernels that address memory alike share
/// parameters.
pub(super) fn tuning_key(m: &Module, anchor: OpId, p: &ProductShape, float: ElemType) -> String {
    let shapes: Vec<String> = m
        .op(anchor)
        .operands
        .iter()
        .take(2)
        .map(|&v| format!("{:?}", shape_of(m, v)))
        .collect();
    let attrs: Vec<String> = m
        .op(anchor)
        .attrs
        .iter()
        // Inherent attributes only: discardable ones (its schedule, the
        // layouts chosen for it) are not part of what it computes.
        .filter(|(k, _)| !k.contains('.'))
        .map(|(k, v)| format!(" {k}={v}"))
        .collect();
    format!(
        "{} m={} n={} k={} batches={} {}{} {}",
        short(m, anchor),
        p.m,
        p.n,
        p.k,
        p.batches,
        shapes.join("x").replace(' ', ""),
        attrs.concat(),
        float
    )
}

/// The configuration of the product `key` names: its schedule's, or
/// where `ircc tune` shares a table with this lowering and the table has
/// the signature, the table's (checked against the product); with whether
/// it was tuned. `placed` of its results are in textures.
fn configure(
    kb: &KernelBuilder,
    tuning: Option<&SharedTuning>,
    key: &str,
    (shape, placed): (ProductShape, usize),
    schedule: &MatmulSchedule,
) -> R<(MatmulConfig, bool)> {
    let scheduled = config_of(schedule);
    if let Some(why) = scheduled.invalid(&shape, target()) {
        return Err(format!(
            "its {SCHEDULE_ATTR} does not fit the product: {why}"
        ));
    }
    if schedule.normalizes && scheduled.splits > 1 {
        return Err(format!(
            "its {SCHEDULE_ATTR} splits K {} ways and normalizes its rows, which every split would walk all of K for (kernel.schedule gives a split product's normalization a kernel of its own)",
            scheduled.splits
        ));
    }
    let Some(tuning) = tuning else {
        return Ok((scheduled, schedule.tuned));
    };
    let mut tuning = tuning.borrow_mut();
    let reads_buffers = kb.inputs.values().any(|i| match i {
        Input::Memory { stored, .. } => !kb.textures.contains_key(stored),
        Input::Partials { .. } => true,
        Input::Splat(_) => false,
    });
    let seen = tuning.seen.entry(key.to_string()).or_insert(Tunable {
        facts: KernelFacts::new(shape, reads_buffers),
        default: scheduled,
        instances: 0,
        kernels: Vec::new(),
        ops: Vec::new(),
    });
    seen.instances += 1;
    let Some(config) = tuning.table.get(key).copied() else {
        return Ok((scheduled, schedule.tuned));
    };
    if let Some(why) = config.invalid(&shape, target()) {
        return Err(format!(
            "{}: the parameters for '{key}' do not fit it: {why}",
            tuning.source
        ));
    }
    // Results texture.map placed as the schedule writes them (by this
    // kernel's texels, or the kernel summing its split) keep the
    // schedule's parameters where the tuned ones would write otherwise.
    let moments = if schedule.normalizes {
        moments_words(config.tile_m(), config.invocations())
    } else {
        0
    };
    let writes_alike = config.splits == scheduled.splits
        && (config.splits > 1 || config.writes_texels(placed, moments, target()));
    let normalizes_alike =
        !schedule.normalizes || (config.splits == 1 && config.fits_beside(moments, target()));
    if (placed > 0 && !writes_alike) || !normalizes_alike {
        return Ok((scheduled, schedule.tuned));
    }
    Ok((config, true))
}

/// The template parameters a schedule gives.
pub(crate) fn config_of(s: &MatmulSchedule) -> MatmulConfig {
    MatmulConfig {
        workgroup_x: s.workgroup[0],
        workgroup_y: s.workgroup[1],
        rows: s.register_tile[0],
        cols: s.register_tile[1],
        k_step: s.k_step,
        splits: s.splits,
        local_memory: s.local_memory,
    }
}

/// The schedule of template parameters `c`.
pub(super) fn schedule_of(c: &MatmulConfig, sum_in_consumers: bool, tuned: bool) -> MatmulSchedule {
    MatmulSchedule {
        workgroup: [c.workgroup_x, c.workgroup_y],
        register_tile: [c.rows, c.cols],
        k_step: c.k_step,
        splits: c.splits,
        local_memory: c.local_memory,
        sum_in_consumers,
        tuned,
        normalizes: false,
    }
}

/// A tiled matrix product (matmul or gemm) with its epilogue; where the
/// configuration splits K, its partial products only (an element-wise
/// kernel sums them and computes the outputs, or where
/// `sum_in_consumers`, the product's readers do). Returns the kernel's
/// tuning signature.
pub(super) fn matmul(
    kb: &mut KernelBuilder,
    anchor: OpId,
    outputs: &[(ValueId, ValueId)],
    tuning: Option<&SharedTuning>,
    schedule: MatmulSchedule,
) -> R<String> {
    let product = Product::of(kb, anchor)?;
    let c = kb.m().op(anchor).results[0];
    let (mm, nn, kk, batch_shape) = product_dims(kb.m(), anchor);
    let batches: i64 = batch_shape.iter().product();
    if batches > target().max_workgroups_per_dimension {
        return Err(format!("{batches} matrix products exceed the grid"));
    }
    let shape = ProductShape {
        m: mm,
        n: nn,
        k: kk,
        batches,
    };
    let key = tuning_key(kb.m(), anchor, &shape, kb.float);
    let placed = outputs
        .iter()
        .filter(|(_, host)| kb.textures.contains_key(host))
        .count();
    let (config, tuned) = configure(kb, tuning, &key, (shape, placed), &schedule)?;
    let MatmulConfig {
        workgroup_x: wgx,
        workgroup_y: wgy,
        rows,
        cols,
        k_step: bk,
        splits,
        local_memory,
    } = config;
    let (tile_m, tile_n) = (config.tile_m(), config.tile_n());
    let [gx, gy, _] = config.grid(&shape);
    if gx > target().max_workgroups_per_dimension || gy > target().max_workgroups_per_dimension {
        return Err("the matrix is too large for one grid".to_string());
    }
    let lx = kb.id(IdKind::Local, 0, wgx);
    let ly = kb.id(IdKind::Local, 1, wgy);
    let wx = kb.id(IdKind::Workgroup, 0, gx);
    let wy = kb.id(IdKind::Workgroup, 1, gy);
    let (batch, split) = batch_and_split(kb, c, &batch_shape, splits);
    let tid = ly.clone() * Ix::constant(wgx) + lx.clone();
    let moments = if schedule.normalizes {
        RowMoments::stage(
            kb,
            &product,
            anchor,
            &batch,
            &TileRows {
                first: wy.clone() * Ix::constant(tile_m),
                rows: tile_m,
                extent: mm,
                k: kk,
                tid: tid.clone(),
                threads: wgx * wgy,
            },
        )?
    } else {
        None
    };
    let moments_words = if moments.is_some() {
        moments_words(tile_m, wgx * wgy)
    } else {
        0
    };
    // A's word at (`row`, `k`), `row` being row `local` of the tile, and
    // B's at (`k`, `col`).
    let a_at = |kb: &mut KernelBuilder, (row, local): (Ix, Ix), k: Ix| match &moments {
        Some(m) => m.operand(kb, &product, &batch, (row, &local), k),
        None => product.operand(kb, 0, &batch, row, k),
    };
    let b_at = |kb: &mut KernelBuilder, k: Ix, col: Ix| product.operand(kb, 1, &batch, k, col);
    // An invocation's rows (columns) are adjacent where it reads them as
    // vec4s from the tile in workgroup memory; otherwise they are a
    // workgroup side apart, so that neighbouring invocations read
    // neighbouring words (no bank conflicts, coalesced loads).
    let (vec4_rows, vec4_cols) = (config.vec4_rows(), config.vec4_cols());
    // Row `i` of the register tile of the invocations at local row `l`.
    let row_in_tile = |l: Ix, i: i64| {
        if vec4_rows {
            l * Ix::constant(rows) + Ix::constant(i)
        } else {
            l + Ix::constant(i * wgy)
        }
    };
    let row_of = |i: i64| row_in_tile(ly.clone(), i);
    let col_of = |j: i64| {
        if vec4_cols {
            lx.clone() * Ix::constant(cols) + Ix::constant(j)
        } else {
            lx.clone() + Ix::constant(j * wgx)
        }
    };
    // This workgroup's K steps: the `split`th of `splits` equal ranges.
    debug_assert_eq!(config.steps(kk) % splits, 0, "splits divide K's steps");
    let k_tiles = config.steps(kk) / splits;
    let first_tile = split.clone() * Ix::constant(k_tiles);
    let first_tile = (splits > 1).then_some(first_tile);
    let step_k = |kt: Ix| match &first_tile {
        Some(first) => (kt + first.clone()) * Ix::constant(bk),
        None => kt * Ix::constant(bk),
    };
    let fma = |kb: &mut KernelBuilder, acc: &[ValueId], xs: &[ValueId], ys: &[ValueId]| {
        let mut next = Vec::new();
        for (i, &x) in xs.iter().enumerate() {
            for (j, &y) in ys.iter().enumerate() {
                let p = kb.ir.binary(BinaryFn::Mul, x, y);
                next.push(kb.ir.binary(BinaryFn::Add, acc[i * cols as usize + j], p));
            }
        }
        next
    };
    let accs_len = (rows * cols) as usize;
    let carried = if local_memory {
        // Neighbouring invocations stage neighbouring words of an operand
        // (so their loads coalesce): along K in A and along N in B, or
        // along the other axis where the operand is stored transposed to
        // the product (a convolution's input at unit stride, its weights,
        // a gemm's transposed operand).
        let a_down_rows = product.rows_adjacent(kb.m(), 0);
        let b_down_rows = product.rows_adjacent(kb.m(), 1);
        // B's tile is [k][column]; A's is [row][k], or where its rows are
        // read as vec4s, [k][row]. Rows are padded where stores walk down
        // them, so that they spread over the banks: by four words where
        // the tile is read as vec4s along its rows, else by one.
        let pad = |down: bool, vec4: bool| match (down, vec4) {
            (false, _) => 0,
            (true, true) => 4,
            (true, false) => 1,
        };
        let a_row = if vec4_rows {
            tile_m + pad(!a_down_rows, true)
        } else {
            bk + pad(a_down_rows, false)
        };
        let a_tile = kb.ir.alloc(
            if vec4_rows {
                bk * a_row
            } else {
                tile_m * a_row
            },
            ElemType::F32,
        );
        let b_row = tile_n + pad(b_down_rows, vec4_cols);
        let b_tile = kb.ir.alloc(bk * b_row, ElemType::F32);
        let zero = kb.ir.constant(0.0, ElemType::F32);
        let a_slot = |row: Ix, k: Ix| {
            if vec4_rows {
                k * Ix::constant(a_row) + row
            } else {
                row * Ix::constant(a_row) + k
            }
        };
        let threads = config.invocations();
        let slot = |l: i64| tid.clone() + Ix::constant(l * threads);
        let (a_loads, b_loads) = config.loads_per_invocation();
        // Four neighbouring words a load (A's along K, B's along its
        // columns) where the operand is stored so in a buffer and not
        // normalized on the way, and every invocation loads whole fours:
        // a quarter of the loads, as in the cooperative template.
        let a_width = if moments.is_none()
            && !a_down_rows
            && bk % 4 == 0
            && a_loads % 4 == 0
            && product.vector_operand(kb, 0, false)
        {
            4
        } else {
            1
        };
        let b_along = if b_down_rows { bk } else { tile_n };
        let b_width =
            if b_along % 4 == 0 && b_loads % 4 == 0 && product.vector_operand(kb, 1, b_down_rows) {
                4
            } else {
                1
            };
        // The words this invocation loads into the tiles at K step `kt`,
        // A's and B's interleaved: (which tile, its slot, the word).
        let fetch = |kb: &mut KernelBuilder, kt: Ix| -> R<Vec<(usize, Ix, ValueId)>> {
            let k0 = step_k(kt);
            let mut words = Vec::new();
            let (a_count, b_count) = (a_loads / a_width, b_loads / b_width);
            for l in 0..a_count.max(b_count) {
                // The first of the load's words in its tile.
                let first = |width: i64| slot(l) * Ix::constant(width);
                if l < a_count {
                    let e = first(a_width);
                    let (ar, ac) = super::attention::split(&e, tile_m, bk, a_down_rows);
                    let k = k0.clone() + ac.clone();
                    let row = wy.clone() * Ix::constant(tile_m) + ar.clone();
                    let values = if a_width == 4 {
                        let batch = &batch;
                        product
                            .operand4_as(kb, 0, batch, (row, k.clone()), false, ElemType::F32)?
                            .to_vec()
                    } else {
                        vec![a_at(kb, (row, ar.clone()), k.clone())?]
                    };
                    // A's vectors lie along K.
                    for (j, v) in values.into_iter().enumerate() {
                        let step = Ix::constant(j as i64);
                        let v = zero_beyond(kb, v, &(k.clone() + step.clone()), kk, bk);
                        words.push((0, a_slot(ar.clone(), ac.clone() + step), v));
                    }
                }
                if l < b_count {
                    let e = first(b_width);
                    let (br, bc) = super::attention::split(&e, bk, tile_n, b_down_rows);
                    let k = k0.clone() + br.clone();
                    let col = wx.clone() * Ix::constant(tile_n) + bc.clone();
                    let values = if b_width == 4 {
                        let at = (k.clone(), col);
                        product
                            .operand4_as(kb, 1, &batch, at, b_down_rows, ElemType::F32)?
                            .to_vec()
                    } else {
                        vec![b_at(kb, k.clone(), col)?]
                    };
                    // B's vectors lie along K where it is staged down its
                    // rows, else along N.
                    for (j, v) in values.into_iter().enumerate() {
                        let step = Ix::constant(j as i64);
                        let (r, c, k) = if b_down_rows {
                            (br.clone() + step.clone(), bc.clone(), k.clone() + step)
                        } else {
                            (br.clone(), bc.clone() + step, k.clone())
                        };
                        let v = zero_beyond(kb, v, &k, kk, bk);
                        words.push((1, r * Ix::constant(b_row) + c, v));
                    }
                }
            }
            Ok(words)
        };
        // Software pipelining: the loads of step kt + 1 are issued before
        // the products of step kt, so their latency hides behind the
        // arithmetic. The last step fetches one tile past K, never used.
        let first = fetch(kb, Ix::constant(0))?;
        let places: Vec<(usize, Ix)> = first.iter().map(|(w, s, _)| (*w, s.clone())).collect();
        let mut init = vec![zero; accs_len];
        init.extend(first.iter().map(|(_, _, v)| *v));
        let carried = kb.for_loop(k_tiles, init, &mut |kb, kt, carried| {
            let (acc, words) = carried.split_at(accs_len);
            for ((which, at), &word) in places.iter().zip(words) {
                kb.store(word, if *which == 0 { a_tile } else { b_tile }, at);
            }
            kb.ir.barrier();
            let prefetched = fetch(kb, kt + Ix::constant(1))?;
            let mut next = kb.for_loop(bk, acc.to_vec(), &mut |kb, k, acc| {
                let xs: Vec<ValueId> = if vec4_rows {
                    (0..rows / 4)
                        .flat_map(|q| {
                            let a = k.clone() * Ix::constant(a_row) + row_of(4 * q);
                            kb.load4(a_tile, &a)
                        })
                        .collect()
                } else {
                    (0..rows)
                        .map(|i| kb.load(a_tile, &(row_of(i) * Ix::constant(a_row) + k.clone())))
                        .collect()
                };
                let ys: Vec<ValueId> = if vec4_cols {
                    (0..cols / 4)
                        .flat_map(|q| {
                            let b = k.clone() * Ix::constant(b_row) + col_of(4 * q);
                            kb.load4(b_tile, &b)
                        })
                        .collect()
                } else {
                    (0..cols)
                        .map(|j| kb.load(b_tile, &(k.clone() * Ix::constant(b_row) + col_of(j))))
                        .collect()
                };
                Ok(fma(kb, acc, &xs, &ys))
            })?;
            kb.ir.barrier();
            next.extend(prefetched.into_iter().map(|(_, _, v)| v));
            Ok(next)
        })?;
        carried[..accs_len].to_vec()
    } else {
        // Each invocation loads its own rows of A and columns of B,
        // through the caches.
        let zero = kb.ir.constant(0.0, ElemType::F32);
        kb.for_loop(k_tiles, vec![zero; accs_len], &mut |kb, kt, acc| {
            let k0 = step_k(kt);
            kb.for_loop(bk, acc.to_vec(), &mut |kb, k, acc| {
                let k = k0.clone() + k;
                let mut xs = Vec::new();
                for i in 0..rows {
                    let row = wy.clone() * Ix::constant(tile_m) + row_of(i);
                    let v = a_at(kb, (row, row_of(i)), k.clone())?;
                    xs.push(zero_beyond(kb, v, &k, kk, bk));
                }
                let mut ys = Vec::new();
                for j in 0..cols {
                    let col = wx.clone() * Ix::constant(tile_n) + col_of(j);
                    let v = b_at(kb, k.clone(), col)?;
                    ys.push(zero_beyond(kb, v, &k, kk, bk));
                }
                Ok(fma(kb, acc, &xs, &ys))
            })
        })?
    };
    // Results placed in textures are written as texels of four
    // neighbouring columns, which different invocations hold: each row of
    // register tiles is staged in workgroup memory, then written by texels.
    let (texels, words): (Vec<_>, Vec<_>) = outputs
        .iter()
        .copied()
        .partition(|(_, host)| splits == 1 && kb.textures.contains_key(host));
    let staging = texel_staging(kb, anchor, &texels, &config, moments_words)?;
    let tile = TexelTile {
        product: &product,
        batch: &batch,
        columns: column_axis(kb.m(), anchor),
        at: [
            wy.clone() * Ix::constant(tile_m),
            wx.clone() * Ix::constant(tile_n),
        ],
        extent: [mm, nn],
        tile: [tile_m, tile_n],
        invocations: (tid.clone(), wgx * wgy),
    };
    for i in 0..rows {
        for j in 0..cols {
            let row = wy.clone() * Ix::constant(tile_m) + row_of(i);
            let col = wx.clone() * Ix::constant(tile_n) + col_of(j);
            let cond = inside_product(kb, (&row, mm, tile_m), (&col, nn, tile_n));
            let idx = product.result_index(&batch, row, col);
            let acc = carried[(i * cols + j) as usize];
            let slot = ly.clone() * Ix::constant(tile_n) + col_of(j);
            guarded(kb, cond, &mut |kb| {
                if splits > 1 {
                    let mut at = vec![split.clone()];
                    at.extend(idx.iter().cloned());
                    kb.store_output(ArgRole::Partials, &at, acc);
                    return Ok(());
                }
                let y = kb.ir.cast(acc, Type::Scalar(kb.float));
                let y = product.epilogue(kb, y, &idx)?;
                kb.memo_put(c, &idx, y);
                store_outputs(kb, &words, &idx)?;
                for (&(inner, _), &stage) in texels.iter().zip(&staging) {
                    let v = kb.value_at(inner, &idx)?;
                    let v = kb.ir.cast(v, Type::Scalar(ElemType::F32));
                    kb.store(v, stage, &slot);
                }
                Ok(())
            })?;
        }
        if !texels.is_empty() {
            kb.ir.barrier();
            tile.write(kb, &texels, &staging, wgy, &|l| row_in_tile(l, i))?;
            kb.ir.barrier();
        }
    }
    let mut tile_parameters = vec![tile_m, tile_n, bk, rows, cols];
    if splits > 1 {
        tile_parameters.push(splits);
    }
    kb.tuned = tuned;
    kb.flops = Some(2 * mm * nn * kk * batches);
    kb.finish(
        [wgx, wgy, 1],
        [gx, gy, batches * splits],
        FuncTemplate::MatmulTiled,
        Some(tile_parameters),
    );
    Ok(key)
}

/// A product's batch index and split of K from the grid's z, the batch
/// and then the split (both templates lay them so): where K is split,
/// the kernel writes f32 partial products of `c`, one a split, which a
/// kernel of their own or the product's readers sum.
pub(super) fn batch_and_split(
    kb: &mut KernelBuilder,
    c: ValueId,
    batch_shape: &[i64],
    splits: i64,
) -> (Vec<Ix>, Ix) {
    let batches: i64 = batch_shape.iter().product();
    let wz = if batches * splits > 1 {
        kb.id(IdKind::Workgroup, 2, batches * splits)
    } else {
        Ix::constant(0)
    };
    if splits == 1 {
        return (delinearize(&wz, batch_shape), Ix::constant(0));
    }
    let mut shape = vec![splits];
    shape.extend(tensor_shape(kb, c));
    kb.partials = Some(Type::tensor(shape, ElemType::F32));
    (
        delinearize(&wz.clone().floor_div(Ix::constant(splits)), batch_shape),
        wz.modulo(Ix::constant(splits)),
    )
}

/// The workgroup arrays, one per result in `texels`, in which a row of
/// register tiles is staged before it is written as texels (checking the
/// results' layouts put their lanes along the product's columns).
fn texel_staging(
    kb: &mut KernelBuilder,
    anchor: OpId,
    texels: &[(ValueId, ValueId)],
    config: &MatmulConfig,
    other_words: i64,
) -> R<Vec<ValueId>> {
    if texels.is_empty() {
        return Ok(Vec::new());
    }
    if !config.writes_texels(texels.len(), other_words, target()) {
        return Err(format!(
            "its results are placed in textures, which its tiles of {}x{} split {} ways cannot write (texture.map copies them where layout.select's writer says so)",
            config.tile_m(),
            config.tile_n(),
            config.splits
        ));
    }
    let columns = column_axis(kb.m(), anchor);
    let space = tensor_shape(kb, kb.m().op(anchor).results[0]);
    for (_, host) in texels {
        let layout = &kb.textures[host];
        if layout.lanes() != columns || layout.shape() != space {
            return Err(format!(
                "a result is placed in a texture with lanes along axis {} of {:?}; the product writes texels along axis {columns} of {space:?}",
                layout.lanes(),
                layout.shape()
            ));
        }
    }
    let words = config.texel_staging_words();
    Ok(texels
        .iter()
        .map(|_| kb.ir.alloc(words, ElemType::F32))
        .collect())
}

/// A workgroup's tile of a product's results, written as texels.
struct TexelTile<'a> {
    product: &'a Product,
    batch: &'a [Ix],
    /// The axis of the results the product's columns run along.
    columns: usize,
    /// The tile's first row and column.
    at: [Ix; 2],
    /// The product's rows and columns.
    extent: [i64; 2],
    tile: [i64; 2],
    /// This invocation's index in the workgroup, and their number.
    invocations: (Ix, i64),
}

impl TexelTile<'_> {
    /// Writes the `rows` rows staged (row `r` at `r` x tile width, its
    /// place in the tile `row_at(r)`) as texels of each result in
    /// `texels`, neighbouring invocations writing neighbouring texels.
    /// Lanes past the product's last column hold zero.
    fn write(
        &self,
        kb: &mut KernelBuilder,
        texels: &[(ValueId, ValueId)],
        staging: &[ValueId],
        rows: i64,
        row_at: &dyn Fn(Ix) -> Ix,
    ) -> R<()> {
        let [mm, nn] = self.extent;
        let [tile_m, tile_n] = self.tile;
        let per_row = tile_n / LANES;
        let count = rows * per_row;
        let (tid, threads) = self.invocations.clone();
        for pass in 0..(count + threads - 1) / threads {
            let t = tid.clone() + Ix::constant(pass * threads);
            let inside =
                ((pass + 1) * threads > count).then(|| kb.index_cmp(CmpPred::Lt, &t, count));
            guarded(kb, inside, &mut |kb| {
                let (r, q) = (
                    t.clone().floor_div(Ix::constant(per_row)),
                    t.clone().modulo(Ix::constant(per_row)),
                );
                let row = self.at[0].clone() + row_at(r.clone());
                let col = self.at[1].clone() + q.clone() * Ix::constant(LANES);
                let cond = inside_product(kb, (&row, mm, tile_m), (&col, nn, tile_n));
                guarded(kb, cond, &mut |kb| {
                    let mut idx = self
                        .product
                        .result_index(self.batch, row.clone(), col.clone());
                    // The texel of four neighbouring columns: of the result's
                    // column, which for a grouped convolution counts its
                    // group's first (a multiple of four) beside `col`.
                    idx[self.columns] = idx[self.columns].clone().floor_div(Ix::constant(LANES));
                    let offset = r.clone() * Ix::constant(tile_n) + q.clone() * Ix::constant(LANES);
                    for (&(_, host), &stage) in texels.iter().zip(staging) {
                        let mut lanes = kb.load4(stage, &offset);
                        if nn % LANES != 0 {
                            for (l, lane) in lanes.iter_mut().enumerate() {
                                let c = col.clone() + Ix::constant(l as i64);
                                let flag = kb.index_cmp(CmpPred::Lt, &c, nn);
                                let zero = kb.ir.constant(0.0, ElemType::F32);
                                *lane = kb.ir.select(flag, *lane, zero);
                            }
                        }
                        let lanes = lanes.map(|v| kb.ir.cast(v, Type::Scalar(kb.float)));
                        let memory = kb.arg(ArgRole::Output(host));
                        let at = kb.textures[&host].texel(&idx);
                        kb.texture_store(lanes, memory, &at);
                    }
                    Ok(())
                })
            })?;
        }
        Ok(())
    }
}

/// Operand word `v` at `k`, zero past K's end where K steps of `bk` run
/// past it.
pub(super) fn zero_beyond(kb: &mut KernelBuilder, v: ValueId, k: &Ix, kk: i64, bk: i64) -> ValueId {
    if kk % bk == 0 {
        return v;
    }
    let inside = kb.index_cmp(CmpPred::Lt, k, kk);
    let zero = kb.ir.constant(0.0, kb.ir.elem(v));
    kb.ir.select(inside, v, zero)
}

/// Whether result `(row, col)` of a tiled product lies inside its `m` x
/// `n` extent: `None` (always) where the tiles divide it.
pub(super) fn inside_product(
    kb: &mut KernelBuilder,
    (row, m, tile_m): (&Ix, i64, i64),
    (col, n, tile_n): (&Ix, i64, i64),
) -> Option<ValueId> {
    let mut flags = Vec::new();
    if m % tile_m != 0 {
        flags.push(kb.index_cmp(CmpPred::Lt, row, m));
    }
    if n % tile_n != 0 {
        flags.push(kb.index_cmp(CmpPred::Lt, col, n));
    }
    (!flags.is_empty()).then(|| kb.ir.all(flags))
}

#[cfg(test)]
mod tests {
    use super::Tiling;

    const H100_UNITS: i64 = 132;

    fn tiling(m: i64, n: i64, k: i64, batches: i64, units: i64) -> (i64, i64) {
        let t = Tiling::choose(m, n, k, batches, units, true);
        (t.register_tile, t.splits)
    }

    #[test]
    fn long_products_of_few_rows_split_k_to_fill_the_device() {
        // Swin-T stage 4 (49 rows): 12 tiles of 64 x 64 for 132 units.
        assert_eq!(tiling(49, 768, 3072, 1, H100_UNITS), (4, 24));
        assert_eq!(tiling(49, 3072, 768, 1, H100_UNITS), (4, 6));
        // ViT-B/16 (197 rows): qkv and the second MLP product.
        assert_eq!(tiling(197, 2304, 768, 1, H100_UNITS), (4, 4));
        assert_eq!(tiling(197, 768, 3072, 1, H100_UNITS), (4, 8));
    }

    #[test]
    fn a_split_needing_a_kernel_to_sum_it_gives_way_to_shorter_workgroups_that_fill_the_units() {
        let own = |m, n, k| {
            let t = Tiling::choose(m, n, k, 1, H100_UNITS, false);
            (t.register_tile, t.workgroup_rows, t.splits)
        };
        // ViT-B/16's qkv and first MLP products: 252 and 336 tiles of
        // 32 x 64 for 132 units, where their readers would split K 4 and 3
        // ways.
        assert_eq!(tiling(197, 2304, 768, 1, H100_UNITS), (4, 4));
        assert_eq!(own(197, 2304, 768), (4, 8, 1));
        assert_eq!(own(197, 3072, 768), (4, 8, 1));
        // Swin-T stage 4's first MLP product: 96 such tiles, too few.
        assert_eq!(own(49, 3072, 768), (4, 16, 6));
    }

    #[test]
    fn products_that_fill_the_device_or_have_short_k_are_not_split() {
        // Enough tiles for every unit.
        assert_eq!(tiling(3136, 768, 3072, 1, H100_UNITS), (4, 1));
        // Few tiles but a short K: the register tile shrinks instead.
        assert_eq!(tiling(196, 1152, 384, 1, H100_UNITS), (2, 1));
        // A device of two compute units is filled by shrinking alone.
        assert_eq!(tiling(49, 768, 3072, 1, 2), (1, 1));
    }

    #[test]
    fn tiles_of_one_result_give_way_to_a_split_that_keeps_the_units_busy() {
        // Swin-T stage 3's second MLP product: 312 tiles of 16 x 16 fill
        // the grid, but 24 of 64 x 64 split 12 ways give 288 workgroups
        // of sixteen results an invocation.
        assert_eq!(tiling(196, 384, 1536, 1, H100_UNITS), (4, 12));
        // Its projection's K of 384 gives too few steps to split so.
        assert_eq!(tiling(196, 384, 384, 1, H100_UNITS), (1, 1));
        // ResNeXt-50 stage 3's first product walks exactly twice
        // matmul_split_min_steps (16 steps of 64) in tiles of one result:
        // 32 tiles of 64 x 64 split 8 ways instead. Its last walks as
        // many (16 steps of 32) in 224 tiles of 2 x 2 results an
        // invocation: 64 tiles split 4 ways grow the grid.
        assert_eq!(tiling(196, 512, 1024, 1, H100_UNITS), (4, 8));
        assert_eq!(tiling(196, 1024, 512, 1, H100_UNITS), (4, 4));
    }

    #[test]
    fn a_split_divides_the_k_steps_and_grows_the_grid_or_replaces_tiles_of_one_result() {
        let target = super::target();
        let workgroups = |m: i64, n: i64, batches: i64, reg: i64| {
            let tile = target.matmul_workgroup * reg;
            ((m + tile - 1) / tile) * ((n + tile - 1) / tile) * batches
        };
        for (m, n, k, batches) in [
            (49, 64, 3072, 1),
            (49, 64, 1000, 1),
            (49, 768, 1184, 1), // 74 steps: 2 splits would shrink the grid
            (49, 768, 1168, 1), // 73 steps, a prime: no split
            (7, 10, 4096, 3),
            (49, 768, 65_536, 2_000), // the grid's z limit bounds the splits
        ] {
            let t = Tiling::choose(m, n, k, batches, 10_000, true);
            let bk = target.matmul_tile_words / (target.matmul_workgroup * t.register_tile);
            let steps = (k + bk - 1) / bk;
            assert_eq!(steps % t.splits, 0, "{m}x{n}x{k}: {t:?}");
            assert!(batches * t.splits <= target.max_workgroups_per_dimension);
            if t.splits > 1 {
                assert!(steps / t.splits >= target.matmul_split_min_steps);
                let unsplit = Tiling::choose(m, n, k, batches, 1, true);
                let split_grid = workgroups(m, n, batches, t.register_tile) * t.splits;
                assert!(
                    split_grid > workgroups(m, n, batches, unsplit.register_tile)
                        || (unsplit.register_tile == 1
                            && split_grid >= target.matmul_min_workgroups),
                    "{m}x{n}x{k}: {t:?}"
                );
            }
        }
        assert_eq!(Tiling::choose(49, 768, 1184, 1, H100_UNITS, true).splits, 1);
        assert_eq!(Tiling::choose(49, 768, 1168, 1, H100_UNITS, true).splits, 1);
        assert!(Tiling::choose(49, 768, 65_536, 2_000, 10_000, true).splits * 2_000 <= 65_535);
    }
}
