//! The cooperative-matrix product (matmul, gemm, one-group convolutions)
//! for targets with matrix units: each subgroup multiplies `side` x `side`
//! f16 matrices into f32 accumulators (`kernel.matrix_multiply_add`), the
//! workgroup's operand tiles staged through workgroup memory as f16 (where
//! any prologue — a convolution's im2col, a transposed or fused operand —
//! has already been applied), the results passed through workgroup memory
//! to the epilogue, which every invocation runs on its share of elements
//! as the FMA template does.

use ircc_core::{ElemType, Type, ValueId};
use ircc_dialects::kernel::ops::{FuncTemplate, IdKind};
use ircc_dialects::kernel::{CooperativeSchedule, DeviceProfile, MatrixRole, MatrixType};

use super::lowering::{ArgRole, Ix, KernelBuilder, guarded, store_outputs, target};
use super::matmul::{batch_and_split, inside_product, zero_beyond};
use super::product::{Product, product_dims};

type R<T> = Result<T, String>;

/// Words of padding after each row of an operand tile (f16 elements: 16
/// bytes), so that the rows of a matrix fall in different banks while
/// rows stay 16-byte aligned for the matrix loads.
const OPERAND_PAD: i64 = 8;
/// The same for the f32 tile of results.
const RESULT_PAD: i64 = 4;

/// K steps whose words an invocation holds in registers ahead of the
/// step it multiplies: on the H200, ViT-B/16's products at f16 took 999
/// us together reading one step ahead, 965 two, 985 three.
const READ_AHEAD: i64 = 2;

/// K steps a split of a product walks at least.
const SPLIT_MIN_STEPS: i64 = 4;
/// K steps a product walks before it is split: on the H200, ViT-B/16's
/// products walking 12 ran faster unsplit (its qkv 15.6 us, against 22.8
/// split with a kernel summing), those walking 24 or 48 faster split
/// (its second MLP product 33.6 -> 23.7 us, Swin-T stage 3's 28.7 -> 14.0).
const SPLIT_FROM_STEPS: i64 = 16;

/// The schedule for an `m` x `n` product over `k`, `batches` times, on
/// `device`, or `None` where its matrix units cannot take it: the device
/// lists no 16 x 16 x 16 multiply of f16 into f32, the tiles would not fit
/// its workgroup memory, or a grid of 32 x 32 tiles would leave compute
/// units idle and K is too short to split (the FMA template's smaller
/// tiles fill them there). Workgroups of 2 x 2 subgroups, each
/// taking 2 x 2 matrices (64 x 64 tiles), fewer while the grid would give
/// a compute unit fewer than four workgroups: every K step waits for its
/// loads, so a unit needs several workgroups to keep loads in flight.
/// Short of that, 2 x 4 subgroups of one matrix each (32 x 64 tiles)
/// where every other unit still gets a workgroup (so wherever 32 x 32
/// tiles give every unit one) and the device runs workgroups of that
/// many invocations, else 2 x 2 (32 x 32): a
/// row of A staged once serves twice the columns (on the H200, ViT-B/16's
/// products of 197 rows together 1.46 -> 1.29 ms), and a workgroup of 256
/// invocations hides more of each step's waits than two of 128 (its
/// projection, 197 x 768 x 768: 11.0 us in 84 tiles of 32 x 64, 12.8 in
/// 168 of 32 x 32, each run after the other). K steps of 64 where K is at
/// least 128, halving the waits (alone on the H100, ViT's MLP products and
/// a 3136 x 768 x 3072 one ran 5-10% faster so). Products that walk a long
/// K split it rather than leave units short of workgroups, their partial
/// products summed by their readers where `sum_in_consumers`, else by a
/// kernel of their own.
pub(super) fn choose(
    m: i64,
    n: i64,
    k: i64,
    batches: i64,
    device: &DeviceProfile,
    sum_in_consumers: bool,
) -> Option<CooperativeSchedule> {
    let side = 16;
    let config = ircc_dialects::kernel::CooperativeMatrix::f16_f32(side as u32);
    if !device
        .cooperative_matrix
        .iter()
        .any(|c| c.same_shape(&config))
    {
        return None;
    }
    let with = |subgroups: [i64; 2], matrices: [i64; 2]| CooperativeSchedule {
        subgroups,
        matrices,
        side,
        k_step: if k >= 8 * side { 4 * side } else { 2 * side },
        subgroup_size: i64::from(device.subgroup_size),
        splits: 1,
        sum_in_consumers: false,
    };
    let workgroups = |s: &CooperativeSchedule| {
        let [tm, tn] = s.tile();
        ceil_div(m, tm) * ceil_div(n, tn) * batches
    };
    let wanted = 4 * i64::from(device.compute_units);
    let s = [[2, 2], [2, 1]]
        .into_iter()
        .map(|matrices| with([2, 2], matrices))
        .find(|s| workgroups(s) >= wanted)
        .or_else(|| {
            let wide = with([2, 4], [1, 1]);
            let fills = 2 * workgroups(&wide) >= i64::from(device.compute_units);
            (fills && invalid(&wide, device).is_none()).then_some(wide)
        })
        .unwrap_or_else(|| with([2, 2], [1, 1]));
    // Short of four workgroups a unit, a product walking a long K splits
    // it over workgroups of 32 x 64 tiles instead, enough to give every
    // unit four where K's steps allow.
    let base = with([2, 4], [1, 1]);
    let steps = ceil_div(k, base.k_step);
    if workgroups(&s) < wanted && steps >= SPLIT_FROM_STEPS {
        let tiles = workgroups(&base);
        let most = ceil_div(wanted, tiles)
            .min(steps / SPLIT_MIN_STEPS)
            .min(target().max_workgroups_per_dimension / batches.max(1));
        if let Some(splits) = (2..=most).rev().find(|d| steps % d == 0) {
            let split = CooperativeSchedule {
                splits,
                sum_in_consumers,
                ..base
            };
            if splits * tiles > workgroups(&s) && invalid(&split, device).is_none() {
                return Some(split);
            }
        }
    }
    // A grid of 32 x 32 tiles that leaves compute units idle even so
    // (Swin-T's last-stage projection, of 49 rows and a K of 768) goes to
    // the FMA template, whose smaller tiles and splits fill them.
    if workgroups(&with([2, 2], [1, 1])) < i64::from(device.compute_units) {
        return None;
    }
    invalid(&s, device).is_none().then_some(s)
}

/// The workgroup memory of schedule `s`: the two f16 operand tiles and the
/// f32 tile of results.
pub(super) fn workgroup_bytes(s: &CooperativeSchedule) -> i64 {
    let [tm, tn] = s.tile();
    let bk = s.k_step;
    2 * (tm * (bk + OPERAND_PAD) + bk * (tn + OPERAND_PAD)) + 4 * tm * (tn + RESULT_PAD)
}

/// Why schedule `s` cannot be built on `device`, if it cannot: the
/// matrix side WGSL has (16), the device's subgroups (invocations map to
/// subgroups by its size), K steps of whole matrices, operand tiles every
/// invocation loads an equal share of, and the device's workgroup limits.
pub(super) fn invalid(s: &CooperativeSchedule, device: &DeviceProfile) -> Option<String> {
    if let Some(why) = subgroups_refuse(s.side, s.subgroup_size, device) {
        return Some(why);
    }
    // Bounds first, so that the products below stay small.
    let small = |v: i64, most: i64| (1..=most).contains(&v);
    if !(s.subgroups.iter().all(|&v| small(v, 16))
        && s.matrices.iter().all(|&v| small(v, 8))
        && small(s.k_step, 256)
        && small(s.splits, 1024))
    {
        return Some("its subgroups (at most 16 a side), matrices (at most 8), k_step (at most 256) or splits (at most 1024) are out of range".to_string());
    }
    if s.k_step % s.side != 0 {
        return Some(format!(
            "its k_step {} is not a multiple of its side",
            s.k_step
        ));
    }
    let [tm, tn] = s.tile();
    let threads = s.invocations();
    let most = i64::from(device.max_workgroup_invocations.unwrap_or(256))
        .min(target().max_workgroup_invocations);
    if threads > most {
        return Some(format!(
            "its {threads} invocations exceed the workgroup limit of {most}"
        ));
    }
    if (tm * s.k_step) % threads != 0 || (s.k_step * tn) % threads != 0 || (tm * tn) % threads != 0
    {
        return Some(format!(
            "its {threads} invocations do not share the {tm} x {} and {} x {tn} operand tiles evenly",
            s.k_step, s.k_step
        ));
    }
    let limit = device.local_memory_bytes.unwrap_or(16384) as i64;
    if workgroup_bytes(s) > limit {
        return Some(format!(
            "its tiles take {} bytes of workgroup memory, over the target's {limit}",
            workgroup_bytes(s)
        ));
    }
    None
}

/// Why a template of `side` x `side` matrices over subgroups of
/// `subgroup_size` invocations cannot run on `device`, if it cannot: WGSL
/// has matrices of 16, and invocations map to subgroups by the device's
/// size.
pub(super) fn subgroups_refuse(
    side: i64,
    subgroup_size: i64,
    device: &DeviceProfile,
) -> Option<String> {
    if side != 16 {
        return Some(format!(
            "its side is {side}; the template multiplies 16 x 16 matrices"
        ));
    }
    if subgroup_size != i64::from(device.subgroup_size) {
        return Some(format!(
            "its subgroup_size {subgroup_size} is not the target's subgroups of {}",
            device.subgroup_size
        ));
    }
    None
}

/// The product `anchor` computes with its epilogue, by schedule `s`.
pub(super) fn lower(
    kb: &mut KernelBuilder,
    anchor: ircc_core::OpId,
    outputs: &[(ValueId, ValueId)],
    s: CooperativeSchedule,
) -> R<()> {
    let device = ircc_dialects::kernel::target_profile(kb.m())?;
    if let Some(why) = invalid(&s, &device) {
        return Err(format!(
            "its matmul_cooperative schedule cannot be built: {why}"
        ));
    }
    let product = Product::of(kb, anchor)?;
    let c = kb.m().op(anchor).results[0];
    let (mm, nn, kk, batch_shape) = product_dims(kb.m(), anchor);
    let batches: i64 = batch_shape.iter().product();
    let [tile_m, tile_n] = s.tile();
    let (gx, gy) = (ceil_div(nn, tile_n), ceil_div(mm, tile_m));
    let (side, bk, threads, splits) = (s.side, s.k_step, s.invocations(), s.splits);
    let most = target().max_workgroups_per_dimension;
    if gx > most || gy > most || batches.saturating_mul(splits) > most {
        return Err("the product is too large for one grid".to_string());
    }
    let k_tiles = ceil_div(kk, bk);
    if k_tiles % splits != 0 {
        return Err(format!(
            "its matmul_cooperative schedule splits K's {k_tiles} steps {splits} ways, unevenly"
        ));
    }
    let tid = kb.id(IdKind::Local, 0, threads);
    let wx = kb.id(IdKind::Workgroup, 0, gx);
    let wy = kb.id(IdKind::Workgroup, 1, gy);
    // A split's workgroups walk its share of K's steps.
    let (batch, split) = batch_and_split(kb, c, &batch_shape, splits);
    let k_tiles = k_tiles / splits;
    let first_tile = split.clone() * Ix::constant(k_tiles);
    // Invocations form subgroups in order of their index, as the drivers
    // of the GPUs with matrix units do (NVIDIA, AMD, Intel).
    let subgroup = tid.clone().floor_div(Ix::constant(s.subgroup_size));
    let sub_row = subgroup.clone().floor_div(Ix::constant(s.subgroups[1]));
    let sub_col = subgroup.modulo(Ix::constant(s.subgroups[1]));
    let (a_stride, b_stride, c_stride) =
        (bk + OPERAND_PAD, tile_n + OPERAND_PAD, tile_n + RESULT_PAD);
    let a_tile = kb.ir.alloc(tile_m * a_stride, ElemType::F16);
    let b_tile = kb.ir.alloc(bk * b_stride, ElemType::F16);
    let c_tile = kb.ir.alloc(tile_m * c_stride, ElemType::F32);
    // Neighbouring invocations read neighbouring words: along K in A and
    // along N in B, or along the other axis where the operand is stored
    // transposed to the product (a 1x1 convolution's input, a gemm's
    // transposed B). Four at a time where the operand is stored so (a
    // matmul's or gemm's operand in a buffer, its rows a multiple of four
    // long): a quarter of the loads (on the H100, ViT-B/16's second MLP
    // product 45 -> 40 us, its products together 1.51 -> 1.43 ms).
    let staged = |which: usize, tile: ValueId, (rows, cols): (i64, i64), stride: i64| {
        let along_rows = product.rows_adjacent(kb.m(), which);
        let vector =
            product.vector_operand(kb, which, along_rows) && (rows * cols / 4) % threads == 0;
        Staged {
            which,
            tile,
            rows,
            cols,
            stride,
            along_rows,
            width: if vector { 4 } else { 1 },
        }
    };
    let operands = [
        staged(0, a_tile, (tile_m, bk), a_stride),
        staged(1, b_tile, (bk, tile_n), b_stride),
    ];
    // The words this invocation stages at K step `kt`, as f16: (tile,
    // slot, words), four consecutive words of the tile where a load's
    // words lie along its rows (stored at once), else one.
    let fetch = |kb: &mut KernelBuilder, kt: Ix| -> R<Vec<(ValueId, Ix, Vec<ValueId>)>> {
        let k0 = kt * Ix::constant(bk);
        let mut words = Vec::new();
        let most = operands.iter().map(|o| o.loads(threads)).max().unwrap_or(0);
        for l in 0..most {
            let e = tid.clone() + Ix::constant(l * threads);
            for o in operands.iter().filter(|o| l < o.loads(threads)) {
                let (r, c) = o.position(&e);
                // The operand's (row, column) and the K index of each
                // word: A's tile is rows x K, B's K x columns.
                let (row, col) = if o.which == 0 {
                    (
                        wy.clone() * Ix::constant(tile_m) + r.clone(),
                        k0.clone() + c.clone(),
                    )
                } else {
                    (
                        k0.clone() + r.clone(),
                        wx.clone() * Ix::constant(tile_n) + c.clone(),
                    )
                };
                let values = if o.width == 4 {
                    product
                        .operand4_as(
                            kb,
                            o.which,
                            &batch,
                            (row.clone(), col.clone()),
                            o.along_rows,
                            ElemType::F16,
                        )?
                        .to_vec()
                } else {
                    vec![product.operand_as(
                        kb,
                        o.which,
                        &batch,
                        row.clone(),
                        col.clone(),
                        ElemType::F16,
                    )?]
                };
                let mut staged = Vec::new();
                for (j, v) in values.into_iter().enumerate() {
                    let step = |x: &Ix, along: bool| {
                        if along {
                            x.clone() + Ix::constant(j as i64)
                        } else {
                            x.clone()
                        }
                    };
                    let (r, c) = (step(&r, o.along_rows), step(&c, !o.along_rows));
                    let kg = if o.which == 0 {
                        step(&col, !o.along_rows)
                    } else {
                        step(&row, o.along_rows)
                    };
                    let v = zero_beyond(kb, v, &kg, kk, bk);
                    staged.push((r * Ix::constant(o.stride) + c, v));
                }
                // A row's four words (its first a multiple of four, as
                // the stride is) go in one store.
                if o.width == 4 && !o.along_rows {
                    let first = staged[0].0.clone();
                    words.push((o.tile, first, staged.into_iter().map(|(_, v)| v).collect()));
                } else {
                    words.extend(staged.into_iter().map(|(at, v)| (o.tile, at, vec![v])));
                }
            }
        }
        Ok(words)
    };
    let matrix = |rows, cols, elem, role| MatrixType {
        rows,
        cols,
        elem,
        role,
    };
    let a_type = matrix(side, side, ElemType::F16, MatrixRole::A);
    let b_type = matrix(side, side, ElemType::F16, MatrixRole::B);
    let c_type = matrix(side, side, ElemType::F32, MatrixRole::C);
    let [fm, fn_] = s.matrices;
    let accs = (fm * fn_) as usize;
    let first_row = sub_row * Ix::constant(fm * side);
    let first_col = sub_col * Ix::constant(fn_ * side);
    // Software pipelining: step kt + READ_AHEAD's words are loaded before
    // step kt's products (the last steps fetch past the split's share of
    // K, never stored).
    let first = fetch(kb, first_tile.clone())?;
    let places: Vec<(ValueId, Ix, usize)> = first
        .iter()
        .map(|(t, at, words)| (*t, at.clone(), words.len()))
        .collect();
    let per_step: usize = places.iter().map(|p| p.2).sum();
    let mut init: Vec<ValueId> = (0..accs).map(|_| kb.ir.matrix_zero(c_type)).collect();
    init.extend(first.iter().flat_map(|(_, _, words)| words.iter().copied()));
    for d in 1..READ_AHEAD {
        let more = fetch(kb, first_tile.clone() + Ix::constant(d))?;
        init.extend(more.iter().flat_map(|(_, _, words)| words.iter().copied()));
    }
    let carried = kb.for_loop(k_tiles, init, &mut |kb, kt, carried| {
        let (acc, words) = carried.split_at(accs);
        let (mut words, later) = words.split_at(per_step);
        for (tile, at, count) in &places {
            let (these, rest) = words.split_at(*count);
            words = rest;
            match *these {
                [x, y, z, w] => kb.store4([x, y, z, w], *tile, at),
                [word] => kb.store(word, *tile, at),
                _ => return Err(format!("{count} words staged at one place")),
            }
        }
        kb.ir.barrier();
        let prefetched = fetch(kb, first_tile.clone() + kt + Ix::constant(READ_AHEAD))?;
        let later = later.to_vec();
        let mut acc = acc.to_vec();
        for step in 0..bk / side {
            let k = Ix::constant(step * side);
            let a: Vec<ValueId> = (0..fm)
                .map(|i| {
                    let row = first_row.clone() + Ix::constant(i * side);
                    kb.matrix_load(
                        a_type,
                        a_tile,
                        &(row * Ix::constant(a_stride) + k.clone()),
                        a_stride,
                    )
                })
                .collect();
            let b: Vec<ValueId> = (0..fn_)
                .map(|j| {
                    let col = first_col.clone() + Ix::constant(j * side);
                    kb.matrix_load(
                        b_type,
                        b_tile,
                        &(k.clone() * Ix::constant(b_stride) + col),
                        b_stride,
                    )
                })
                .collect();
            for (i, &x) in a.iter().enumerate() {
                for (j, &y) in b.iter().enumerate() {
                    let at = i * b.len() + j;
                    acc[at] = kb.ir.matrix_multiply_add(x, y, acc[at]);
                }
            }
        }
        kb.ir.barrier();
        acc.extend(later);
        acc.extend(prefetched.into_iter().flat_map(|(_, _, words)| words));
        Ok(acc)
    })?;
    for i in 0..fm {
        for j in 0..fn_ {
            let row = first_row.clone() + Ix::constant(i * side);
            let col = first_col.clone() + Ix::constant(j * side);
            let acc = carried[(i * fn_ + j) as usize];
            kb.matrix_store(acc, c_tile, &(row * Ix::constant(c_stride) + col), c_stride);
        }
    }
    kb.ir.barrier();
    // The epilogue, an element at a time: consecutive invocations take
    // consecutive columns, so the stores coalesce.
    kb.for_loop(tile_m * tile_n / threads, Vec::new(), &mut |kb, l, _| {
        let e = tid.clone() + l * Ix::constant(threads);
        let (r, col) = (
            e.clone().floor_div(Ix::constant(tile_n)),
            e.modulo(Ix::constant(tile_n)),
        );
        let acc = kb.load(c_tile, &(r.clone() * Ix::constant(c_stride) + col.clone()));
        let row = wy.clone() * Ix::constant(tile_m) + r;
        let colg = wx.clone() * Ix::constant(tile_n) + col;
        let cond = inside_product(kb, (&row, mm, tile_m), (&colg, nn, tile_n));
        let idx = product.result_index(&batch, row, colg);
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
            store_outputs(kb, outputs, &idx)
        })?;
        Ok(Vec::new())
    })?;
    let mut tile_parameters = vec![tile_m, tile_n, bk, side];
    if splits > 1 {
        tile_parameters.push(splits);
    }
    kb.flops = Some(2 * mm * nn * kk * batches);
    kb.finish(
        [threads, 1, 1],
        [gx, gy, batches * splits],
        FuncTemplate::MatmulCooperative,
        Some(tile_parameters),
    );
    Ok(())
}

/// An operand tile of `rows` x `cols` words staged by the workgroup's
/// invocations in turn, `width` (1 or 4) neighbouring words a load:
/// neighbouring loads go down a column where `along_rows`, else along a
/// row.
struct Staged {
    which: usize,
    tile: ValueId,
    rows: i64,
    cols: i64,
    /// Words between rows of the tile in workgroup memory.
    stride: i64,
    along_rows: bool,
    width: i64,
}

impl Staged {
    /// Loads each of `threads` invocations makes.
    fn loads(&self, threads: i64) -> i64 {
        self.rows * self.cols / self.width / threads
    }

    /// The (row, column) of the first word of load `e`.
    fn position(&self, e: &Ix) -> (Ix, Ix) {
        let w = Ix::constant(self.width);
        if self.along_rows {
            let rows = Ix::constant(self.rows / self.width);
            (
                e.clone().modulo(rows.clone()) * w,
                e.clone().floor_div(rows),
            )
        } else {
            let cols = Ix::constant(self.cols / self.width);
            (
                e.clone().floor_div(cols.clone()),
                e.clone().modulo(cols) * w,
            )
        }
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> DeviceProfile {
        DeviceProfile::named("nvidia_vulkan").unwrap()
    }

    #[test]
    fn tiles_shrink_until_every_unit_has_four_workgroups() {
        let tiles = |m, n, k| {
            let s = choose(m, n, k, 1, &h100(), true).unwrap();
            (s.tile(), s.k_step)
        };
        // ViT-B/16's qkv product: 144 tiles of 64x64 and 288 of 64x32 for
        // 132 units, so 252 of 32x64.
        assert_eq!(tiles(197, 2304, 768), ([32, 64], 64));
        // Its projection: 84 tiles of 32x64, for every other unit; 168
        // of 32x32 where the device runs no workgroup of 256 invocations.
        assert_eq!(tiles(197, 768, 768), ([32, 64], 64));
        let mut narrow = h100();
        narrow.max_workgroup_invocations = Some(128);
        let s = choose(197, 768, 768, 1, &narrow, true).map(|s| s.tile());
        assert_eq!(s, Some([32, 32]));
        // A stage-one ConvNeXt-T product of 3136 rows fills the device
        // with 64x64 tiles.
        assert_eq!(tiles(3136, 768, 3072), ([64, 64], 64));
        assert_eq!(tiles(3136, 384, 96), ([64, 32], 32));
        let s = choose(3136, 768, 3072, 1, &h100(), true).unwrap();
        assert_eq!(invalid(&s, &h100()), None);
        let huge = CooperativeSchedule {
            subgroups: [1 << 32, 1 << 32],
            ..s
        };
        assert!(invalid(&huge, &h100()).unwrap().contains("out of range"));
        let half = CooperativeSchedule {
            subgroup_size: 16,
            ..s
        };
        assert!(invalid(&half, &h100()).unwrap().contains("subgroup_size"));
        let greedy = CooperativeSchedule {
            matrices: [8, 8],
            k_step: 256,
            ..s
        };
        assert!(invalid(&greedy, &h100()).unwrap().contains("workgroup"));
        assert!(workgroup_bytes(&s) <= 49152);
    }

    #[test]
    fn long_walks_split_k_and_short_grids_of_short_walks_go_to_the_fma_template() {
        let split = |m, n, k| {
            let s = choose(m, n, k, 1, &h100(), false).unwrap();
            assert_eq!(invalid(&s, &h100()), None);
            (s.tile(), s.splits)
        };
        // ViT-B/16's second MLP product: 7 x 12 tiles of 32x64, its 48
        // steps of K split 6 ways (504 workgroups for 132 units).
        assert_eq!(split(197, 768, 3072), ([32, 64], 6));
        // Swin-T stage 3's: 7 x 6 tiles, 24 steps in 6 splits of four.
        assert_eq!(split(196, 384, 1536), ([32, 64], 6));
        // Swin-T's last stage: 2 x 12 tiles, 48 steps in 12 splits.
        assert_eq!(split(49, 768, 3072), ([32, 64], 12));
        // Walks of 12 steps stay whole: ViT-B/16's qkv product.
        assert_eq!(split(197, 2304, 768), ([32, 64], 1));
        // Swin-T's last-stage projection: 2 x 24 tiles of 32x32 for 132
        // units, and too short a walk to split.
        assert_eq!(choose(49, 768, 768, 1, &h100(), true), None);
        // ViT-B/16's projection: 7 x 24 = 168 tiles of 32x32, enough.
        assert!(choose(197, 768, 768, 1, &h100(), true).is_some());
        let s = choose(197, 768, 3072, 1, &h100(), true).unwrap();
        assert!(s.sum_in_consumers);
        let too_many = CooperativeSchedule { splits: 5000, ..s };
        assert!(invalid(&too_many, &h100()).unwrap().contains("splits"));
    }

    #[test]
    fn devices_without_the_matrices_get_none() {
        for name in ["adreno740", "lavapipe", "nvidia_h100_probed"] {
            let device = DeviceProfile::named(name).unwrap();
            assert_eq!(choose(197, 2304, 768, 1, &device, true), None, "{name}");
        }
        let mut small = h100();
        small.local_memory_bytes = Some(16384);
        assert_eq!(choose(3136, 768, 3072, 1, &small, true), None);
    }
}
