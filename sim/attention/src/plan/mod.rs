//! Turning a schedule and a tiling into a task graph.
//!
//! Every schedule is written in terms of the same few building blocks:
//! DRAM loads and stores, MAC tiles, softmax rows on the VEC unit, and the
//! buffers that limit how far ahead a load may run. Buffering is where the
//! schedules differ, and one rule is applied to all of them:
//!
//! * Per-head operands (the S×E matrices Q_h, K_h, V_h) are double-buffered
//!   everywhere, so the next head's copy loads in the background.
//! * A *sequential* step (a tile or row chunk of each Layer-Wise operator
//!   and of Soft-Pipe's PV phase, a fused tile of FLAT or TileFlow) owns a
//!   single buffer from its input load to its output write-back: the next
//!   step starts only once this one's result is in DRAM.
//! * A *pipelined* stream (Soft-Pipe's QKᵀ+softmax phase, TileFlow's strips
//!   inside a tile, all of MAS) double-buffers its steps.
//!
//! Every block of query rows is split across the cores, which share the L1
//! and so each transfer (see [`Geom`]).
//!
//! This is the reading of §5.1 most consistent with Table 2: the cycles of
//! Layer-Wise and Soft-Pipe come out as the MAC time plus their exposed
//! intermediate traffic, FLAT's as the MAC time plus softmax plus its
//! per-block Q/O transfers, and TileFlow's as the MAC time plus those
//! transfers; MAS-Attention hides everything behind the MAC time.

mod flat;
mod layer_wise;
mod mas;
mod soft_pipe;
mod tileflow;

use crate::accelerator::Accelerator;
use crate::energy::Accesses;
use crate::engine::{Graph, Resource, TaskId};
use crate::error::{SimError, TilingError};
use crate::schedule::Schedule;
use crate::tiling::Tiling;
use crate::workload::Workload;

/// Largest task graph a single simulation may build. It bounds the work of
/// every simulation, and so of the search.
pub(crate) const MAX_TASKS: u64 = 1 << 18;

/// A task graph ready to run, with its access counts.
pub(crate) struct Plan {
    pub graph: Graph,
    pub accesses: Accesses,
}

/// Builds the task graph of `schedule` with `tiling` on `workload`.
pub(crate) fn build(
    acc: &Accelerator,
    workload: &Workload,
    schedule: Schedule,
    tiling: Tiling,
) -> Result<Plan, SimError> {
    tiling.check(schedule, workload.seq)?;
    let geom = Geom::new(acc, workload);
    let (need, mas_mode) = requirements(acc, &geom, schedule, tiling);
    let l1_bytes = need.l1_elems * u64::from(acc.elem_bytes);
    if l1_bytes > acc.l1_bytes {
        return Err(TilingError::ExceedsL1 {
            needed: l1_bytes,
            capacity: acc.l1_bytes,
        }
        .into());
    }
    if need.tasks > MAX_TASKS {
        return Err(TilingError::TooManyTasks {
            tasks: need.tasks,
            limit: MAX_TASKS,
        }
        .into());
    }
    let mut b = Builder::new(acc, geom);
    match schedule {
        Schedule::LayerWise => layer_wise::build(&mut b, tiling),
        Schedule::SoftPipe => soft_pipe::build(&mut b, tiling),
        Schedule::Flat => flat::build(&mut b, tiling),
        Schedule::TileFlow => tileflow::build(&mut b, tiling),
        Schedule::Mas => mas::build(&mut b, tiling, mas_mode),
    }
    Ok(Plan {
        graph: b.graph,
        accesses: b.accesses,
    })
}

/// What `tiling` needs, and for MAS whether it must overwrite.
fn requirements(
    acc: &Accelerator,
    geom: &Geom,
    schedule: Schedule,
    tiling: Tiling,
) -> (Need, mas::Mode) {
    let fits = |need: Need| need.l1_elems * u64::from(acc.elem_bytes) <= acc.l1_bytes;
    let mas_mode = mas::Mode::choose(geom, tiling, fits);
    let need = match schedule {
        Schedule::LayerWise => layer_wise::need(geom, tiling),
        Schedule::SoftPipe => soft_pipe::need(geom, tiling),
        Schedule::Flat => flat::need(geom, tiling),
        Schedule::TileFlow => tileflow::need(geom, tiling),
        Schedule::Mas => mas::need(geom, tiling, mas_mode),
    };
    (need, mas_mode)
}

/// What a tiling needs: L1 elements in all and tasks in all (an upper
/// bound, computed before building so that too fine a tiling costs
/// nothing).
#[derive(Debug, Clone, Copy)]
struct Need {
    l1_elems: u64,
    tasks: u64,
}

/// Workload geometry as the schedules see it.
///
/// Heads are processed one after the other (batch 1), and every block of
/// query rows is split evenly across the cores: they share the L1, so one
/// DRAM transfer of Q, K or V serves all of them, and a step that waits
/// for its input waits on both cores' behalf.
#[derive(Debug, Clone, Copy)]
struct Geom {
    heads: u32,
    seq: u32,
    /// Per-head embedding E.
    dim: u32,
    cores: u32,
}

impl Geom {
    fn new(acc: &Accelerator, w: &Workload) -> Self {
        Self {
            heads: w.heads,
            seq: w.seq,
            dim: w.head_dim(),
            cores: acc.cores,
        }
    }

    /// Elements of one S×E head operand.
    fn head_elems(&self) -> u64 {
        u64::from(self.seq) * u64::from(self.dim)
    }

    /// Blocks of `rows` query rows per head.
    fn blocks_per_head(&self, rows: u32) -> u64 {
        u64::from(self.seq / rows)
    }

    /// Blocks of `rows` query rows over all heads.
    fn blocks(&self, rows: u32) -> u64 {
        u64::from(self.heads) * self.blocks_per_head(rows)
    }

    /// The head of each block of `rows` rows, in processing order.
    fn block_heads(&self, rows: u32) -> Vec<u32> {
        (0..self.heads)
            .flat_map(|h| std::iter::repeat_n(h, (self.seq / rows) as usize))
            .collect()
    }

    /// `rows` split across the cores: (core, its rows), for cores with any.
    fn split(&self, rows: u32) -> Vec<(u32, u32)> {
        let (share, extra) = (rows / self.cores, rows % self.cores);
        (0..self.cores)
            .map(|c| (c, share + u32::from(c < extra)))
            .filter(|&(_, r)| r > 0)
            .collect()
    }
}

/// The two MatMuls of attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MatMul {
    /// C = Q Kᵀ: an rows×cols output block, reduction over E.
    Qk,
    /// O += P V: an rows×cols block of P times cols×E of V.
    Pv,
}

/// Adds tasks to a graph and counts their accesses.
struct Builder<'a> {
    acc: &'a Accelerator,
    geom: Geom,
    graph: Graph,
    accesses: Accesses,
    /// First task of the current phase (see [`Builder::fence`]).
    phase_start: usize,
}

impl<'a> Builder<'a> {
    fn new(acc: &'a Accelerator, geom: Geom) -> Self {
        Self {
            acc,
            geom,
            graph: Graph::new(),
            accesses: Accesses::default(),
            phase_start: 0,
        }
    }

    fn bytes(&self, elems: u64) -> u64 {
        elems * u64::from(self.acc.elem_bytes)
    }

    /// DRAM → L1.
    fn load(&mut self, elems: u64, deps: &[Option<TaskId>]) -> TaskId {
        self.accesses.dram_reads += elems;
        self.accesses.l1_writes += elems;
        let cycles = self.acc.dram_cycles(self.bytes(elems));
        self.graph.add(Resource::Dram, cycles, deps)
    }

    /// L1 → DRAM.
    fn store(&mut self, elems: u64, deps: &[Option<TaskId>]) -> TaskId {
        self.accesses.l1_reads += elems;
        self.accesses.dram_writes += elems;
        let cycles = self.acc.dram_cycles(self.bytes(elems));
        self.graph.add(Resource::Dram, cycles, deps)
    }

    fn mac_cycles(&self, rows: u32, cols: u32) -> u64 {
        self.acc.mac_tile_cycles(rows, cols, self.geom.dim)
    }

    /// One MAC tile of `op` on `core`: operands come from L1 into L0 and
    /// the result goes back to L1.
    fn matmul(
        &mut self,
        op: MatMul,
        core: u32,
        rows: u32,
        cols: u32,
        deps: &[Option<TaskId>],
    ) -> TaskId {
        let (r, c, d) = (u64::from(rows), u64::from(cols), u64::from(self.geom.dim));
        let macs = r * c * d;
        let a = &mut self.accesses;
        match op {
            MatMul::Qk => {
                a.l1_reads += (r + c) * d;
                a.l1_writes += r * c;
            }
            MatMul::Pv => {
                // P block, V block and the partial O it accumulates into.
                a.l1_reads += r * c + c * d + r * d;
                a.l1_writes += r * d;
            }
        }
        a.mac_ops += macs;
        a.l0_accesses += 3 * macs;
        let cycles = self.mac_cycles(rows, cols);
        self.graph.add(Resource::Mac(core), cycles, deps)
    }

    fn softmax_cycles(&self, rows: u32) -> u64 {
        u64::from(rows) * self.acc.softmax_row_cycles(self.geom.seq)
    }

    /// Softmax of `rows` full rows on `core`'s VEC unit, in place.
    fn softmax(&mut self, core: u32, rows: u32, deps: &[Option<TaskId>]) -> TaskId {
        let elems = u64::from(rows) * u64::from(self.geom.seq);
        // A row that fits in L0 is read and written once; otherwise each
        // of the three passes (max, exp-sum, normalise) streams it from L1
        // and the last two write it back.
        let (reads, writes) = if self.acc.softmax_row_fits_l0(self.geom.seq) {
            (1, 1)
        } else {
            (3, 2)
        };
        let ops = elems * self.acc.softmax.per_element();
        let a = &mut self.accesses;
        a.l1_reads += reads * elems;
        a.l1_writes += writes * elems;
        a.vec_ops += ops;
        a.l0_accesses += 2 * ops;
        let cycles = self.softmax_cycles(rows);
        self.graph.add(Resource::Vec(core), cycles, deps)
    }

    /// A task that completes when all of `tasks` have.
    fn join(&mut self, tasks: &[TaskId]) -> TaskId {
        let deps: Vec<Option<TaskId>> = tasks.iter().copied().map(Some).collect();
        self.graph.add(Resource::Sync, 0, &deps)
    }

    /// Runs `task` for each core's share of `rows`, returning the tasks.
    fn per_core(
        &mut self,
        rows: u32,
        mut task: impl FnMut(&mut Self, u32, u32) -> TaskId,
    ) -> Vec<TaskId> {
        self.geom
            .split(rows)
            .into_iter()
            .map(|(core, r)| task(self, core, r))
            .collect()
    }

    /// Ends a phase: returns a task that completes when everything added
    /// since the previous fence has. The next phase's loads wait on it.
    fn fence(&mut self) -> TaskId {
        let sinks: Vec<Option<TaskId>> = self
            .graph
            .sinks_from(self.phase_start)
            .into_iter()
            .map(Some)
            .collect();
        let fence = self.graph.add(Resource::Sync, 0, &sinks);
        self.phase_start = fence.index();
        fence
    }
}

/// A claimed buffer slot: what must finish before it may be refilled.
#[must_use = "a claimed slot must be released"]
struct Slot {
    index: usize,
    wait: Option<TaskId>,
}

/// A ring of buffer slots reused in turn: a slot is refilled only after
/// the task that released it last time has finished.
struct Ring {
    released_by: Vec<Option<TaskId>>,
    next: usize,
}

impl Ring {
    fn new(depth: usize) -> Self {
        Self {
            released_by: vec![None; depth],
            next: 0,
        }
    }

    fn claim(&mut self) -> Slot {
        let index = self.next;
        self.next = (index + 1) % self.released_by.len();
        Slot {
            index,
            wait: self.released_by[index].take(),
        }
    }

    fn release(&mut self, slot: Slot, by: TaskId) {
        self.released_by[slot.index] = Some(by);
    }
}

/// A per-head operand (S×E) resident in L1 while its head is processed,
/// double-buffered so the next head's copy loads in the background.
struct Resident {
    ring: Ring,
    held: Option<Held>,
}

struct Held {
    head: u32,
    slot: Slot,
    load: TaskId,
    last_use: TaskId,
}

impl Resident {
    fn new() -> Self {
        Self {
            ring: Ring::new(2),
            held: None,
        }
    }

    /// The load of `head`'s copy, issued (after `gate`) on first use.
    fn fetch(&mut self, b: &mut Builder, head: u32, gate: Option<TaskId>) -> TaskId {
        if let Some(held) = &self.held
            && held.head == head
        {
            return held.load;
        }
        if let Some(old) = self.held.take() {
            self.ring.release(old.slot, old.last_use);
        }
        let slot = self.ring.claim();
        let load = b.load(b.geom.head_elems(), &[slot.wait, gate]);
        self.held = Some(Held {
            head,
            slot,
            load,
            last_use: load,
        });
        load
    }

    /// Records the latest task that reads the current copy.
    fn used_by(&mut self, task: TaskId) {
        if let Some(held) = &mut self.held {
            held.last_use = task;
        }
    }
}

/// What one round of a MAC/VEC software pipeline over `n` row blocks runs
/// (Alg. 1): the softmax of block `i - 1` on the VEC unit while the MAC
/// unit computes PV of block `i - 2` and then QKᵀ of block `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Round {
    softmax: Option<usize>,
    pv: Option<usize>,
    qk: Option<usize>,
}

/// The rounds of the pipeline over `n` blocks (0-based block indices):
/// warm-up, regular rounds, and the two finalising rounds.
fn pipeline(n: usize) -> impl Iterator<Item = Round> {
    (0..n + 2).map(move |k| Round {
        softmax: k.checked_sub(1).filter(|&i| i < n),
        pv: k.checked_sub(2).filter(|&i| i < n),
        qk: Some(k).filter(|&i| i < n),
    })
}

/// O = P V as its own kernel after `gate` (Layer-Wise, and Soft-Pipe's
/// second phase): blocks of `rows` rows of P loaded, multiplied with V_h
/// and stored.
fn weighted_values(b: &mut Builder, rows: u32, gate: TaskId) {
    let seq = b.geom.seq;
    let mut v = Resident::new();
    let mut retired: Option<TaskId> = None;
    for head in b.geom.block_heads(rows) {
        let lv = v.fetch(b, head, Some(gate));
        let p = b.load(u64::from(rows) * u64::from(seq), &[retired, Some(gate)]);
        let outputs = b.per_core(rows, |b, core, r| {
            b.matmul(MatMul::Pv, core, r, seq, &[Some(p), Some(lv)])
        });
        let done = b.join(&outputs);
        v.used_by(done);
        retired = Some(b.store(u64::from(rows) * u64::from(b.geom.dim), &[Some(done)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_follows_algorithm_1() {
        // MAC order C1 C2 O1 C3 O2 O3; VEC order P1 P2 P3.
        let rounds: Vec<Round> = pipeline(3).collect();
        let r = |softmax, pv, qk| Round { softmax, pv, qk };
        assert_eq!(
            rounds,
            [
                r(None, None, Some(0)),
                r(Some(0), None, Some(1)),
                r(Some(1), Some(0), Some(2)),
                r(Some(2), Some(1), None),
                r(None, Some(2), None),
            ]
        );
    }

    #[test]
    fn task_estimates_bound_the_graphs() {
        let w = Workload::new("t", 3, 64, 96).unwrap();
        // A small L1 so that MAS overwrites on the larger tilings.
        let acc = Accelerator {
            l1_bytes: 40 * 1024,
            ..Accelerator::default()
        };
        let mut built = 0;
        for schedule in Schedule::ALL {
            let dims = crate::tiling::space(&acc, schedule, w.seq);
            let inner: Vec<Option<u32>> = match dims.get(1) {
                Some(values) => values.iter().copied().map(Some).collect(),
                None => vec![None],
            };
            for &rows in &dims[0] {
                for &inner in &inner {
                    let tiling = Tiling { rows, inner };
                    let Ok(plan) = build(&acc, &w, schedule, tiling) else {
                        continue;
                    };
                    let (need, _) = requirements(&acc, &Geom::new(&acc, &w), schedule, tiling);
                    assert!(
                        plan.graph.len() as u64 <= need.tasks,
                        "{schedule} {tiling:?}"
                    );
                    built += 1;
                }
            }
        }
        assert!(built > 20);
    }

    #[test]
    fn blocks_go_head_by_head_split_across_cores() {
        let acc = Accelerator::default();
        let w = Workload::new("t", 2, 64, 48).unwrap();
        let g = Geom::new(&acc, &w);
        assert_eq!(g.block_heads(32), [0, 0, 1, 1]);
        assert_eq!(g.split(32), [(0, 16), (1, 16)]);
        assert_eq!(g.split(5), [(0, 3), (1, 2)]);
        assert_eq!(g.split(1), [(0, 1)]);
    }
}
