//! MAS-Attention (§4): the MAC stream (Alg. 2 and 4) and the VEC stream
//! (Alg. 3) run semi-synchronously, round after round (Alg. 1).
//!
//! Multi-tiered tiling (§4.2): a round works on a block of `rows` = N_Q
//! query rows of one head (B_b = H_h = 1), softmax at row granularity,
//! while the MatMuls stream K and V through L1 in sub-tiles of `kv_rows` =
//! N_{K,V} rows (Alg. 2 and 4). Q and O blocks are double-buffered, so the
//! next round's loads overlap the current one. Softmax works in place, so
//! two row blocks are live at once (§5.5: P_i with either P_{i-1} or
//! C_{i+1}).

use super::{Builder, Geom, MatMul, Need, Ring, Round, Slot, pipeline};
use crate::engine::TaskId;
use crate::tiling::Tiling;

/// How L1 is shared between the two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Every buffer has its own space.
    Normal,
    /// The proactive overwrite of §4.3: the K/V sub-tiles get no space of
    /// their own. When a round's softmax completes, its P block takes the
    /// space of the sub-tile the MAC units are working on; that MatMul tile
    /// is halted, its sub-tile reloaded from DRAM and the tile redone. The
    /// halted tile is charged in full (its partial work is lost).
    Overwrite,
}

impl Mode {
    /// Normal when it fits, the overwrite when only that fits.
    pub(super) fn choose(g: &Geom, t: Tiling, fits: impl Fn(Need) -> bool) -> Self {
        if !fits(need(g, t, Mode::Normal)) && fits(need(g, t, Mode::Overwrite)) {
            Mode::Overwrite
        } else {
            Mode::Normal
        }
    }
}

fn kv_rows(t: Tiling) -> u32 {
    t.inner.unwrap_or(t.rows)
}

pub(super) fn need(g: &Geom, t: Tiling, mode: Mode) -> Need {
    let (s, d) = (u64::from(g.seq), u64::from(g.dim));
    let (rows, kv) = (u64::from(t.rows), u64::from(kv_rows(t)));
    // Two row blocks, double-buffered Q and O blocks.
    let rounds = 2 * rows * s + 4 * rows * d;
    // Two K and two V sub-tiles.
    let subtiles = 4 * kv * d;
    let l1_elems = match mode {
        Mode::Normal => rounds + subtiles,
        Mode::Overwrite => rounds,
    };
    // Per round: Q load and O store, per sub-tile a K and a V load with a
    // tile per core and a join each, per core a softmax, three joins, and
    // in overwrite mode a reload with a redo per core.
    let cores = u64::from(g.cores);
    let overwrite = if mode == Mode::Overwrite {
        1 + cores
    } else {
        0
    };
    let per_round = 5 + cores + 2 * (s / kv) * (2 + cores) + overwrite;
    Need {
        l1_elems,
        tasks: g.blocks(t.rows) * per_round,
    }
}

pub(super) fn build(b: &mut Builder, t: Tiling, mode: Mode) {
    let heads = b.geom.block_heads(t.rows);
    let n = heads.len();
    let mut mas = Mas {
        heads,
        rows: t.rows,
        kv: kv_rows(t),
        mode,
        q: Ring::new(2),
        o: Ring::new(2),
        row_blocks: Ring::new(2),
        k: SubTiles::new(),
        v: SubTiles::new(),
        scores: vec![Vec::new(); n],
        probs: vec![Vec::new(); n],
        slots: (0..n).map(|_| None).collect(),
    };
    for round in pipeline(n) {
        mas.round(b, round);
    }
}

/// The two streams' state across rounds.
struct Mas {
    /// Head of each block.
    heads: Vec<u32>,
    rows: u32,
    kv: u32,
    mode: Mode,
    q: Ring,
    o: Ring,
    row_blocks: Ring,
    k: SubTiles,
    v: SubTiles,
    /// Per block, per core (in `Geom::split` order, which is core order):
    /// the last QKᵀ tile and the softmax.
    scores: Vec<Vec<TaskId>>,
    probs: Vec<Vec<TaskId>>,
    /// Per block: its row-block slot.
    slots: Vec<Option<Slot>>,
}

/// The halt of §4.3 in overwrite mode, for one round: the softmax, done
/// `at` cycles into the round, overwrites the sub-tile of the MAC tiles in
/// flight then.
struct Halt {
    softmax: TaskId,
    at: u64,
    elapsed: u64,
    done: bool,
}

impl Mas {
    fn round(&mut self, b: &mut Builder, round: Round) {
        // The VEC stream's softmax is emitted first so that an overwrite
        // can refer to it; the MAC stream runs PV then QKᵀ (Alg. 1, lines
        // 13-17), both starting with the softmax.
        let mut halt = None;
        if let Some(i) = round.softmax {
            let probs = b.per_core(self.rows, |b, core, r| {
                b.softmax(core, r, &[self.scores[i].get(core as usize).copied()])
            });
            let softmax = b.join(&probs);
            self.probs[i] = probs;
            if self.mode == Mode::Overwrite {
                halt = Some(Halt {
                    softmax,
                    at: b.softmax_cycles(self.rows.div_ceil(b.geom.cores)),
                    elapsed: 0,
                    done: false,
                });
            }
        }
        if let Some(i) = round.pv {
            self.output(b, i, &mut halt);
        }
        if let Some(i) = round.qk {
            self.scores(b, i, &mut halt);
        }
    }

    fn subtiles(&self, b: &Builder) -> u32 {
        b.geom.seq / self.kv
    }

    /// Alg. 2: C_i = Q_i Kᵀ, K streamed in sub-tiles.
    fn scores(&mut self, b: &mut Builder, i: usize, halt: &mut Option<Halt>) {
        let q = self.q.claim();
        let lq = b.load(u64::from(self.rows) * u64::from(b.geom.dim), &[q.wait]);
        let block = self.row_blocks.claim();
        let mut tiles = Vec::new();
        for j in 0..self.subtiles(b) {
            let lk = self.k.fetch(b, self.heads[i], j, self.kv);
            tiles = b.per_core(self.rows, |b, core, r| {
                b.matmul(
                    MatMul::Qk,
                    core,
                    r,
                    self.kv,
                    &[Some(lq), Some(lk), block.wait],
                )
            });
            let used = b.join(&tiles);
            self.k.used_by(self.heads[i], j, used);
            self.after_tiles(b, MatMul::Qk, &tiles, halt);
        }
        let done = b.join(&tiles);
        self.q.release(q, done);
        self.scores[i] = tiles;
        self.slots[i] = Some(block);
    }

    /// Alg. 4: O_i = P_i V, V streamed in sub-tiles, O_i written back.
    fn output(&mut self, b: &mut Builder, i: usize, halt: &mut Option<Halt>) {
        let o = self.o.claim();
        let mut tiles = Vec::new();
        for j in 0..self.subtiles(b) {
            let lv = self.v.fetch(b, self.heads[i], j, self.kv);
            let probs = &self.probs[i];
            tiles = b.per_core(self.rows, |b, core, r| {
                let p = probs.get(core as usize).copied();
                b.matmul(MatMul::Pv, core, r, self.kv, &[p, Some(lv), o.wait])
            });
            let used = b.join(&tiles);
            self.v.used_by(self.heads[i], j, used);
            self.after_tiles(b, MatMul::Pv, &tiles, halt);
        }
        let deps: Vec<Option<TaskId>> = tiles.iter().copied().map(Some).collect();
        let store = b.store(u64::from(self.rows) * u64::from(b.geom.dim), &deps);
        self.o.release(o, store);
        if let Some(slot) = self.slots[i].take() {
            let done = b.join(&tiles);
            self.row_blocks.release(slot, done);
        }
    }

    /// In overwrite mode, redoes the MAC tiles that the round's softmax
    /// halts, after reloading their overwritten sub-tile.
    fn after_tiles(&self, b: &mut Builder, op: MatMul, tiles: &[TaskId], halt: &mut Option<Halt>) {
        let Some(h) = halt else { return };
        h.elapsed += b.mac_cycles(self.rows.div_ceil(b.geom.cores), self.kv);
        if h.done || h.elapsed <= h.at {
            return;
        }
        h.done = true;
        let reload = b.load(
            u64::from(self.kv) * u64::from(b.geom.dim),
            &[Some(h.softmax)],
        );
        for ((core, r), &tile) in b.geom.split(self.rows).into_iter().zip(tiles) {
            b.matmul(op, core, r, self.kv, &[Some(reload), Some(tile)]);
        }
    }
}

/// The two L1 slots of K (or V) sub-tiles. A sub-tile still in its slot
/// from the previous round of the same head is used again rather than
/// reloaded: with N_{K,V} = S (one sub-tile, i.e. all of K_h) or two
/// sub-tiles per head, K and V thus come from DRAM once per head, as in
/// FLAT (§5.4.2 finds MAS's DRAM reads equal to FLAT's unless the overwrite
/// forces reloads). Slots are direct-mapped by (head, sub-tile) so that a
/// single-sub-tile head alternates slots and the next head's copy loads in
/// the background.
struct SubTiles {
    slots: [Option<Held>; 2],
}

struct Held {
    head: u32,
    index: u32,
    load: TaskId,
    last_use: TaskId,
}

impl SubTiles {
    fn new() -> Self {
        Self {
            slots: [None, None],
        }
    }

    fn slot(head: u32, index: u32, per_head: u32) -> usize {
        ((u64::from(head) * u64::from(per_head) + u64::from(index)) % 2) as usize
    }

    /// The load that brings sub-tile `index` of `head` into L1, issuing it
    /// if the sub-tile is not already there.
    fn fetch(&mut self, b: &mut Builder, head: u32, index: u32, kv: u32) -> TaskId {
        let at = Self::slot(head, index, b.geom.seq / kv);
        let slot = &mut self.slots[at];
        match slot {
            Some(held) if held.head == head && held.index == index => held.load,
            _ => {
                let wait = slot.as_ref().map(|held| held.last_use);
                let load = b.load(u64::from(kv) * u64::from(b.geom.dim), &[wait]);
                *slot = Some(Held {
                    head,
                    index,
                    load,
                    last_use: load,
                });
                load
            }
        }
    }

    /// Records the latest use of sub-tile `index` of `head`.
    fn used_by(&mut self, head: u32, index: u32, task: TaskId) {
        let held = self.slots.iter_mut().flatten();
        if let Some(held) = held
            .into_iter()
            .find(|h| h.head == head && h.index == index)
        {
            held.last_use = task;
        }
    }
}
