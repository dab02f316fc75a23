//! The cooperative attention template, FlashAttention-2's plan on the
//! matrix units: a workgroup per block of queries of one head, a subgroup
//! per `side` of them. The block's queries are read once, as f16 matrices
//! each subgroup holds; each tile of keys and values is staged in
//! workgroup memory as f16 (keys transposed, the products' B), read into
//! registers while the tile before is computed where the schedule says
//! (`read_ahead`). Per tile:
//!
//! 1. each subgroup multiplies its queries by the keys into f32 scores,
//!    stored to workgroup memory;
//! 2. each invocation takes its share of one query's scores (scaled,
//!    capped and masked as the op says), and the invocations of a query
//!    agree on its new maximum through workgroup memory;
//! 3. the weights, `exp(score - maximum)`, go back as f16; each subgroup
//!    multiplies its queries' weights by the values into f32 sums, stored
//!    to workgroup memory where they overwrite the scores;
//! 4. each invocation rescales its share of the query's running sums of
//!    values (held in registers, as FlashAttention-2 holds its output)
//!    and adds the tile's.
//!
//! A matrix's elements are opaque to the invocations of its subgroup (WGSL
//! and Vulkan define no layout), so the softmax, which works on rows,
//! reads the scores through workgroup memory, and the running sums stay in
//! registers rather than in accumulators that would need rescaling.

use ircc_core::{ElemType, Module, OpId, Type, ValueId};
use ircc_dialects::graph;
use ircc_dialects::kernel::ops::{BinaryFn, CmpPred, FuncTemplate, IdKind, UnaryFn};
use ircc_dialects::kernel::{
    AttentionCooperativeSchedule, CooperativeMatrix, DeviceProfile, MatrixRole, MatrixType,
};

use super::super::lowering::{Ix, KernelBuilder, guarded, target};
use super::super::values::ACC;
use super::{Dims, R, Scorer, Team, Tile, Weight, kv_head, store_result, wrap};

/// f16 words of padding after each row of an f16 tile (16 bytes): rows
/// fall in different banks and stay 16-byte aligned for matrix loads.
const OPERAND_PAD: i64 = 8;
/// The same for the f32 tile of scores and sums.
const RESULT_PAD: i64 = 4;
/// The most words of a tile an invocation stages: its loads are unrolled,
/// so this bounds the kernel a schedule written by hand can ask for.
const STAGED_WORDS: i64 = 256;
/// The matrix side WGSL's cooperative matrices have.
const SIDE: i64 = 16;

/// Where schedule `s` keeps its tiles for shapes `d`: row strides in
/// words, and the invocations sharing a query.
struct Layout {
    /// Invocations per query: each takes `keys / lanes` scores of a tile
    /// and `value_size / lanes` columns of the sums.
    lanes: i64,
    /// The keys of a tile transposed: `size` rows of the tile's keys.
    keys_stride: i64,
    /// The values of a tile: a row per key.
    values_stride: i64,
    /// Scores, then sums of values: a row per query.
    results_stride: i64,
    /// The queries at first, then the weights (f16): a row per query.
    weights_stride: i64,
}

impl Layout {
    fn of(s: &AttentionCooperativeSchedule, d: &Dims) -> Layout {
        Layout {
            lanes: s.invocations() / s.queries(),
            keys_stride: s.keys + OPERAND_PAD,
            values_stride: d.value_size + OPERAND_PAD,
            results_stride: s.keys.max(d.value_size) + RESULT_PAD,
            weights_stride: s.keys.max(d.size) + OPERAND_PAD,
        }
    }

    /// Bytes of workgroup memory: the f16 tiles of keys, values and
    /// weights, the f32 tile of results and each query's lanes' maxima.
    fn bytes(&self, s: &AttentionCooperativeSchedule, d: &Dims) -> i64 {
        let f16_words = d.size * self.keys_stride
            + s.keys * self.values_stride
            + s.queries() * self.weights_stride;
        let f32_words = s.queries() * (self.results_stride + self.lanes);
        2 * f16_words + 4 * f32_words
    }
}

/// The most words of a key and value tile an invocation reads ahead
/// into registers, holding them across the tile before (more spill, or
/// leave too few workgroups a unit: on an H100, 12 heads of 64 and 197
/// queries ran in 24.9 us with blocks of 32 queries and tiles of 64 keys
/// not read ahead, 27.5 with tiles of 32 read ahead).
const READ_AHEAD_WORDS: i64 = 64;

/// The schedule for the attention op `op` on `device`, for a device of
/// `units` compute units; `None` where the template cannot take it (no 16
/// x 16 x 16 f16 -> f32 matrices, head or value sizes not whole matrices,
/// tiles over the workgroup memory). Blocks of four subgroups (64
/// queries), fewer while the grid would give fewer than one workgroup to
/// every two compute units (a workgroup's tiles then take turns on a unit
/// with no other to hide their waits: at 197 queries, blocks of 16 for
/// every unit ran 39.5 us on an H100, blocks of 32 for every other unit
/// 27.5); key tiles of 64, fewer where workgroup memory needs, read ahead
/// where [`READ_AHEAD_WORDS`] allows (at 2048 queries 225 us, 281 not).
pub(in super::super) fn choose(
    m: &Module,
    op: OpId,
    device: &DeviceProfile,
    units: i64,
) -> Option<AttentionCooperativeSchedule> {
    let d = graph::ops::Attention::new(m, op).and_then(|a| Dims::of(m, &a))?;
    let fitting = |subgroups: i64| {
        [64, 32, 16].into_iter().find_map(|keys| {
            let threads = subgroups * i64::from(device.subgroup_size);
            let s = AttentionCooperativeSchedule {
                subgroups,
                keys,
                side: SIDE,
                subgroup_size: i64::from(device.subgroup_size),
                read_ahead: keys * (d.size + d.value_size) / threads <= READ_AHEAD_WORDS,
            };
            invalid(&s, &d, device).is_none().then_some(s)
        })
    };
    let candidates: Vec<_> = [4, 2, 1].into_iter().filter_map(fitting).collect();
    candidates
        .iter()
        .find(|s| fills(s, &d, units))
        .or(candidates.last())
        .copied()
}

/// Whether schedule `s`'s grid gives every other one of `units` compute
/// units a workgroup.
fn fills(s: &AttentionCooperativeSchedule, d: &Dims, units: i64) -> bool {
    let blocks = (d.queries + s.queries() - 1) / s.queries();
    2 * blocks * d.batch * d.heads >= units
}

/// Whether schedule `s` runs attention op `op` faster than the other
/// templates would, as measured: where its keys take several tiles. Keys
/// that fit one tile leave its blocks nothing to amortize their staging
/// over: Swin-T's windows of 49 tokens took its first two stages' four
/// attention kernels 82.5 us on an H200 at f16, in the network, where the
/// tiled template takes them 66.1 (all its kernels: 1.219 ms so, 1.205 with
/// the tiled template there), though alone on an H100 it beat the tiled
/// one at 96 blocks of 64 (18.6 us against 22.8).
pub(in super::super) fn pays_off(m: &Module, op: OpId, s: &AttentionCooperativeSchedule) -> bool {
    graph::ops::Attention::new(m, op)
        .and_then(|a| Dims::of(m, &a))
        .is_some_and(|d| d.keys > s.keys)
}

/// Why schedule `s` cannot compute attention of shapes `d` on `device`,
/// if it cannot.
pub(in super::super) fn invalid(
    s: &AttentionCooperativeSchedule,
    d: &Dims,
    device: &DeviceProfile,
) -> Option<String> {
    let config = CooperativeMatrix::f16_f32(SIDE as u32);
    if !device
        .cooperative_matrix
        .iter()
        .any(|c| c.same_shape(&config))
    {
        return Some("the target lists no 16 x 16 x 16 f16 -> f32 cooperative matrix".into());
    }
    if let Some(why) = super::super::cooperative::subgroups_refuse(s.side, s.subgroup_size, device)
    {
        return Some(why);
    }
    let small = |v: i64, most: i64| (1..=most).contains(&v);
    if !(small(s.subgroups, 16) && small(s.keys, 256) && small(s.subgroup_size, 1024)) {
        return Some(
            "its subgroups (at most 16), keys (at most 256) or subgroup_size are out of range"
                .into(),
        );
    }
    if s.subgroup_size % s.side != 0 {
        return Some(format!(
            "its subgroups of {} do not give each of a matrix's {} rows whole invocations",
            s.subgroup_size, s.side
        ));
    }
    let l = Layout::of(s, d);
    if d.size % s.side != 0 || d.value_size % s.side != 0 || s.keys % s.side != 0 {
        return Some(format!(
            "its head size {}, value size {} or key tile {} is not whole matrices of {}",
            d.size, d.value_size, s.keys, s.side
        ));
    }
    if s.keys % (4 * l.lanes) != 0 || d.value_size % (4 * l.lanes) != 0 {
        return Some(format!(
            "its key tile {} or value size {} does not give each of a query's {} invocations whole vectors",
            s.keys, d.value_size, l.lanes
        ));
    }
    if d.size > 256 || d.value_size > 256 {
        return Some("its head or value size is over 256".into());
    }
    let threads = s.invocations();
    if s.keys * (d.size + d.value_size) > STAGED_WORDS * threads {
        return Some(format!(
            "its tiles of {} keys give each of its {threads} invocations over {STAGED_WORDS} words to stage",
            s.keys
        ));
    }
    if (s.keys * d.size) % threads != 0 || (s.keys * d.value_size) % threads != 0 {
        return Some(format!(
            "its {threads} invocations do not share a tile of keys or values evenly"
        ));
    }
    let most = i64::from(device.max_workgroup_invocations.unwrap_or(256))
        .min(target().max_workgroup_invocations);
    if threads > most {
        return Some(format!(
            "its {threads} invocations exceed the workgroup limit of {most}"
        ));
    }
    let limit = device.local_memory_bytes.unwrap_or(16384) as i64;
    if l.bytes(s, d) > limit {
        return Some(format!(
            "its tiles take {} bytes of workgroup memory, over the target's {limit}",
            l.bytes(s, d)
        ));
    }
    let blocks = (d.queries + s.queries() - 1) / s.queries();
    let grid = target().max_workgroups_per_dimension;
    if blocks > grid || d.batch * d.heads > grid {
        return Some("its blocks of queries or its heads exceed the grid".into());
    }
    None
}

/// The cooperative template over `[batch, heads, queries, value size]`
/// with schedule `s`.
pub(in super::super) fn attention_cooperative(
    kb: &mut KernelBuilder,
    op: OpId,
    outputs: &[(ValueId, ValueId)],
    s: AttentionCooperativeSchedule,
) -> R<()> {
    let a = graph::ops::Attention::new(kb.m(), op).ok_or("not a graph.attention")?;
    let (q, k, v) = (a.q(), a.k(), a.v());
    let d = Dims::of(kb.m(), &a).ok_or("attention of tensors")?;
    let device = ircc_dialects::kernel::target_profile(kb.m())?;
    if let Some(why) = invalid(&s, &d, &device) {
        return Err(format!(
            "its attention_cooperative schedule cannot be built: {why}"
        ));
    }
    let scorer = Scorer::of(kb.m(), op, &d)?;
    let l = Layout::of(&s, &d);
    let (side, keys, rows, threads) = (s.side, s.keys, s.queries(), s.invocations());
    let (lanes, scores_each, columns_each) = (l.lanes, keys / l.lanes, d.value_size / l.lanes);
    let blocks = (d.queries + rows - 1) / rows;
    let tid = kb.id(IdKind::Local, 0, threads);
    let block = kb.id(IdKind::Workgroup, 0, blocks);
    let head = kb.id(IdKind::Workgroup, 1, d.batch * d.heads);
    let b = head.clone().floor_div(Ix::constant(d.heads));
    let h = head.modulo(Ix::constant(d.heads));
    let g = kv_head(&h, d.group);
    // Invocations form subgroups in order of their index (as on the GPUs
    // with matrix units); a query's lanes are neighbours, so subgroup `w`
    // takes queries `w * side ..` for its matrices and its softmax alike.
    let first_row = tid.clone().floor_div(Ix::constant(s.subgroup_size)) * Ix::constant(side);
    let row = tid.clone().floor_div(Ix::constant(lanes));
    let part = tid.clone().modulo(Ix::constant(lanes));
    let first_query = block * Ix::constant(rows);
    let i = first_query.clone() + row.clone();
    let ragged_queries = d.queries % rows != 0;
    let qi = wrap(&i, d.queries, ragged_queries);
    let keys_t = kb.ir.alloc(d.size * l.keys_stride, ElemType::F16);
    let values = kb.ir.alloc(keys * l.values_stride, ElemType::F16);
    let weights = kb.ir.alloc(rows * l.weights_stride, ElemType::F16);
    let results = kb.ir.alloc(rows * l.results_stride, ACC);
    let maxima = kb.ir.alloc(rows * lanes, ACC);
    let team = Team {
        tid: tid.clone(),
        threads,
    };
    let matrix = |elem, role| MatrixType {
        rows: side,
        cols: side,
        elem,
        role,
    };
    let (a_type, b_type, c_type) = (
        matrix(ElemType::F16, MatrixRole::A),
        matrix(ElemType::F16, MatrixRole::B),
        matrix(ACC, MatrixRole::C),
    );
    // The block's queries, once, through the weights' tile: each subgroup
    // keeps its rows as matrices.
    let f16_tile = |kb: &KernelBuilder, operand, memory, shape, stride| Tile {
        elem: ElemType::F16,
        ..Tile::new(kb, operand, memory, shape, stride)
    };
    let queries = f16_tile(kb, q, weights, [rows, d.size], l.weights_stride);
    team.load_tile(kb, &queries, [&b, &h], &first_query, d.queries)?;
    kb.ir.barrier();
    // The subgroup's rows of the weights' tile (at first, the queries) as
    // `count` matrices along them.
    let rows_of_weights = |kb: &mut KernelBuilder, count: i64| -> Vec<ValueId> {
        (0..count)
            .map(|x| {
                let at =
                    first_row.clone() * Ix::constant(l.weights_stride) + Ix::constant(x * side);
                kb.matrix_load(a_type, weights, &at, l.weights_stride)
            })
            .collect()
    };
    // The subgroup's rows times `columns` matrices of the tile `b` (rows
    // `stride` words apart), into its rows of the results' tile.
    let multiply =
        |kb: &mut KernelBuilder, a: &[ValueId], b: ValueId, stride: i64, columns: i64| {
            for column in 0..columns {
                let mut acc = kb.ir.matrix_zero(c_type);
                for (x, &m) in a.iter().enumerate() {
                    let at = Ix::constant(x as i64 * side * stride + column * side);
                    let other = kb.matrix_load(b_type, b, &at, stride);
                    acc = kb.ir.matrix_multiply_add(m, other, acc);
                }
                let at = first_row.clone() * Ix::constant(l.results_stride)
                    + Ix::constant(column * side);
                kb.matrix_store(acc, results, &at, l.results_stride);
            }
        };
    let query_matrices = rows_of_weights(kb, d.size / side);
    let tiles = (d.keys + keys - 1) / keys;
    let ragged_keys = d.keys % keys != 0;
    // The keys go in transposed. Each invocation takes an equal share of
    // a tile's loads, a word a load where vectors would not share evenly.
    let mut operands = [
        Tile {
            transposed: true,
            ..f16_tile(kb, k, keys_t, [keys, d.size], l.keys_stride)
        },
        f16_tile(kb, v, values, [keys, d.value_size], l.values_stride),
    ];
    for t in &mut operands {
        if t.loads() % threads != 0 {
            t.words_a_load = 1;
        }
    }
    // The words this invocation stages for key tile `tile`, as f16: (tile
    // array, slot, word).
    let fetch = |kb: &mut KernelBuilder, tile: Ix| -> R<Vec<(ValueId, Ix, ValueId)>> {
        let first = tile * Ix::constant(keys);
        let mut words = Vec::new();
        for t in &operands {
            for n in 0..t.loads() / threads {
                let e = tid.clone() + Ix::constant(n * threads);
                for (x, at) in t.load(kb, [&b, &g], &first, d.keys, &e)? {
                    words.push((t.memory, at, x));
                }
            }
        }
        Ok(words)
    };
    let first_tile = if s.read_ahead {
        fetch(kb, Ix::constant(0))?
    } else {
        Vec::new()
    };
    let slots: Vec<(ValueId, Ix)> = first_tile
        .iter()
        .map(|(t, at, _)| (*t, at.clone()))
        .collect();
    let lowest = kb.ir.constant(f64::from(f32::MIN), ACC);
    let zero = kb.ir.constant(0.0, ACC);
    let mut init = vec![lowest, zero];
    init.extend(std::iter::repeat_n(zero, columns_each as usize));
    init.extend(first_tile.iter().map(|(_, _, x)| *x));
    let sums_at =
        row.clone() * Ix::constant(l.results_stride) + part.clone() * Ix::constant(columns_each);
    let carried = kb.for_loop(tiles, init, &mut |kb, tile, c| {
        let (max, total) = (c[0], c[1]);
        let (sums, words) = c[2..].split_at(columns_each as usize);
        // The tile's words: read ahead while the tile before was
        // computed, or now.
        let staged = if s.read_ahead {
            let words = slots.iter().zip(words);
            words
                .map(|((memory, at), &x)| (*memory, at.clone(), x))
                .collect()
        } else {
            fetch(kb, tile.clone())?
        };
        for (memory, at, x) in staged {
            kb.store(x, memory, &at);
        }
        kb.ir.barrier();
        // The next tile's loads go out now (the last tile reads the first
        // again, never stored).
        let prefetched = if s.read_ahead {
            let next = (tile.clone() + Ix::constant(1)).modulo(Ix::constant(tiles));
            fetch(kb, next)?
        } else {
            Vec::new()
        };
        // 1. Scores.
        multiply(kb, &query_matrices, keys_t, l.keys_stride, keys / side);
        kb.ir.barrier();
        // 2. This invocation's scores and the query's new maximum.
        let first_key = tile * Ix::constant(keys) + part.clone() * Ix::constant(scores_each);
        let scores_at =
            row.clone() * Ix::constant(l.results_stride) + part.clone() * Ix::constant(scores_each);
        let mut seen = Vec::with_capacity(scores_each as usize);
        for x in 0..scores_each / 4 {
            let dots = kb.load4(results, &(scores_at.clone() + Ix::constant(4 * x)));
            for (n, dot) in dots.into_iter().enumerate() {
                let j = first_key.clone() + Ix::constant(4 * x + n as i64);
                seen.push(scorer.score_key(kb, dot, [&b, &h, &qi], &j, ragged_keys, lowest)?);
            }
        }
        let own = seen
            .iter()
            .fold(max, |m, &(s, _)| kb.ir.binary(BinaryFn::Max, m, s));
        let lane_slot = row.clone() * Ix::constant(lanes);
        kb.store(own, maxima, &(lane_slot.clone() + part.clone()));
        kb.ir.barrier();
        let next_max = (0..lanes).fold(own, |m, x| {
            let other = kb.load(maxima, &(lane_slot.clone() + Ix::constant(x)));
            kb.ir.binary(BinaryFn::Max, m, other)
        });
        // 3. Weights, then weights times values.
        let mut added = zero;
        for (x, &(s, allowed)) in seen.iter().enumerate() {
            let shift = kb.ir.binary(BinaryFn::Sub, s, next_max);
            let mut w = kb.ir.unary(UnaryFn::Exp, shift);
            if let Some(flag) = allowed {
                w = kb.ir.select(flag, w, zero);
            }
            added = kb.ir.binary(BinaryFn::Add, added, w);
            let w = kb.ir.cast(w, Type::Scalar(ElemType::F16));
            let at = row.clone() * Ix::constant(l.weights_stride)
                + part.clone() * Ix::constant(scores_each)
                + Ix::constant(x as i64);
            kb.store(w, weights, &at);
        }
        let drop = kb.ir.binary(BinaryFn::Sub, max, next_max);
        let rescale = kb.ir.unary(UnaryFn::Exp, drop);
        let kept = kb.ir.binary(BinaryFn::Mul, total, rescale);
        let next_total = kb.ir.binary(BinaryFn::Add, kept, added);
        kb.ir.barrier();
        let weight_matrices = rows_of_weights(kb, keys / side);
        multiply(
            kb,
            &weight_matrices,
            values,
            l.values_stride,
            d.value_size / side,
        );
        kb.ir.barrier();
        // 4. The running sums, rescaled, plus the tile's. (The next
        // tile's stores wait at its first barrier for these reads.)
        let mut next = vec![next_max, next_total];
        for (x, four) in sums.chunks(4).enumerate() {
            let tile_sums = kb.load4(results, &(sums_at.clone() + Ix::constant(4 * x as i64)));
            for (&sum, add) in four.iter().zip(tile_sums) {
                let kept = kb.ir.binary(BinaryFn::Mul, sum, rescale);
                next.push(kb.ir.binary(BinaryFn::Add, kept, add));
            }
        }
        next.extend(prefetched.into_iter().map(|(_, _, x)| x));
        Ok(next)
    })?;
    // The query's total over its lanes.
    let lane_slot = row.clone() * Ix::constant(lanes);
    kb.store(carried[1], maxima, &(lane_slot.clone() + part.clone()));
    kb.ir.barrier();
    let total = (0..lanes).fold(zero, |t, x| {
        let own = kb.load(maxima, &(lane_slot.clone() + Ix::constant(x)));
        kb.ir.binary(BinaryFn::Add, t, own)
    });
    // A query whose keys are all masked has no weight: zeros.
    let any = kb.ir.cmp(CmpPred::Gt, total, zero);
    let weight = Weight { total, any, zero };
    for (x, &sum) in carried[2..2 + columns_each as usize].iter().enumerate() {
        let e = part.clone() * Ix::constant(columns_each) + Ix::constant(x as i64);
        let cond = ragged_queries.then(|| kb.index_cmp(CmpPred::Lt, &i, d.queries));
        let idx = [b.clone(), h.clone(), i.clone(), e];
        guarded(kb, cond, &mut |kb| {
            store_result(kb, op, outputs, &idx, sum, weight)
        })?;
    }
    kb.finish(
        [threads, 1, 1],
        [blocks, d.batch * d.heads, 1],
        FuncTemplate::AttentionCooperative,
        Some(vec![rows, keys, side]),
    );
    Ok(())
}
