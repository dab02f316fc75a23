//! Discrete-event execution of a task graph.
//!
//! Each MAC and VEC unit runs its tasks in program order (the order they
//! were added), like an in-order instruction stream: a task starts once the
//! unit is free and its dependencies are done. The DRAM channel, shared by
//! the cores, serves the oldest ready transfer in program order, like a DMA
//! engine issuing the oldest descriptor whose buffer is free: a prefetch
//! that became ready early does not jump ahead of a transfer the program
//! needs sooner. Everything is integer arithmetic with fixed tie-breaking,
//! so runs are deterministic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::graph::{Graph, Resource};
use crate::error::SimError;

/// Outcome of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeline {
    /// Cycle at which the last task finished.
    pub makespan: u64,
    /// Busy cycles summed over all MAC units.
    pub mac_busy: u64,
}

/// A unit's index: 0 is DRAM, then MAC and VEC of each core in turn.
fn unit(resource: Resource) -> Option<usize> {
    match resource {
        Resource::Dram => Some(0),
        Resource::Mac(core) => Some(1 + 2 * core as usize),
        Resource::Vec(core) => Some(2 + 2 * core as usize),
        Resource::Sync => None,
    }
}

/// Event queue entries: (time, task), smallest first.
type Queue = BinaryHeap<Reverse<(u64, u32)>>;
/// Ready DRAM transfers, oldest in program order first.
type Ready = BinaryHeap<Reverse<u32>>;

struct Run<'g> {
    graph: &'g Graph,
    successors: Vec<Vec<u32>>,
    remaining: Vec<usize>,
    /// Per in-order unit, its tasks in program order and the next to start.
    program: Vec<Vec<u32>>,
    cursor: Vec<usize>,
    busy: Vec<bool>,
    dram_ready: Ready,
    events: Queue,
    completed: usize,
    timeline: Timeline,
}

/// Runs `graph` to completion.
pub(crate) fn run(graph: &Graph) -> Result<Timeline, SimError> {
    let n = graph.len();
    let units = (0..n)
        .filter_map(|t| unit(graph.resource(t)))
        .max()
        .map_or(1, |u| u + 1);
    let mut successors = vec![Vec::new(); n];
    let mut program = vec![Vec::new(); units];
    for t in 0..n {
        for dep in graph.deps(t) {
            successors[dep.index()].push(t as u32);
        }
        if let Some(u @ 1..) = unit(graph.resource(t)) {
            program[u].push(t as u32);
        }
    }
    let mut state = Run {
        graph,
        successors,
        remaining: (0..n).map(|t| graph.deps(t).len()).collect(),
        program,
        cursor: vec![0; units],
        busy: vec![false; units],
        dram_ready: Ready::new(),
        events: Queue::new(),
        completed: 0,
        timeline: Timeline {
            makespan: 0,
            mac_busy: 0,
        },
    };
    for t in 0..n {
        if state.remaining[t] == 0 {
            state.ready(t as u32, 0);
        }
    }
    state.simulate();
    if state.completed == n {
        Ok(state.timeline)
    } else {
        Err(SimError::Deadlock {
            completed: state.completed,
            total: n,
        })
    }
}

impl Run<'_> {
    fn simulate(&mut self) {
        let mut now = 0;
        loop {
            self.dispatch(now);
            let Some(Reverse((time, task))) = self.events.pop() else {
                return;
            };
            now = time;
            self.complete(task, now);
            while let Some(&Reverse((time, task))) = self.events.peek() {
                if time != now {
                    break;
                }
                self.events.pop();
                self.complete(task, now);
            }
        }
    }

    /// Starts a task on every idle unit that has one ready.
    fn dispatch(&mut self, now: u64) {
        if !self.busy[0]
            && let Some(Reverse(task)) = self.dram_ready.pop()
        {
            self.start(0, task, now);
        }
        for u in 1..self.program.len() {
            if self.busy[u] {
                continue;
            }
            if let Some(&task) = self.program[u].get(self.cursor[u])
                && self.remaining[task as usize] == 0
            {
                self.cursor[u] += 1;
                self.start(u, task, now);
            }
        }
    }

    fn start(&mut self, u: usize, task: u32, now: u64) {
        let cycles = self.graph.cycles(task as usize);
        if matches!(self.graph.resource(task as usize), Resource::Mac(_)) {
            self.timeline.mac_busy = self.timeline.mac_busy.saturating_add(cycles);
        }
        self.busy[u] = true;
        self.events
            .push(Reverse((now.saturating_add(cycles), task)));
    }

    fn ready(&mut self, task: u32, now: u64) {
        match self.graph.resource(task as usize) {
            Resource::Sync => self.events.push(Reverse((now, task))),
            Resource::Dram => self.dram_ready.push(Reverse(task)),
            // In-order units find it through their program cursor.
            Resource::Mac(_) | Resource::Vec(_) => {}
        }
    }

    fn complete(&mut self, task: u32, now: u64) {
        self.completed += 1;
        self.timeline.makespan = self.timeline.makespan.max(now);
        if let Some(u) = unit(self.graph.resource(task as usize)) {
            self.busy[u] = false;
        }
        for i in 0..self.successors[task as usize].len() {
            let s = self.successors[task as usize][i];
            self.remaining[s as usize] -= 1;
            if self.remaining[s as usize] == 0 {
                self.ready(s, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_overlap_but_dependencies_serialise() {
        let mut g = Graph::new();
        let load = g.add(Resource::Dram, 10, &[]);
        let mac = g.add(Resource::Mac(0), 5, &[Some(load)]);
        // Independent of the chain: runs alongside from cycle 0.
        g.add(Resource::Vec(0), 12, &[]);
        g.add(Resource::Dram, 3, &[Some(mac)]);
        let t = run(&g).unwrap();
        assert_eq!(t.makespan, 18);
        assert_eq!(t.mac_busy, 5);
    }

    #[test]
    fn in_order_unit_blocks_on_its_head() {
        let mut g = Graph::new();
        let slow = g.add(Resource::Dram, 100, &[]);
        // The first MAC task waits for the load; the second, although
        // ready, must wait behind it.
        g.add(Resource::Mac(0), 1, &[Some(slow)]);
        g.add(Resource::Mac(0), 1, &[]);
        assert_eq!(run(&g).unwrap().makespan, 102);
    }

    #[test]
    fn dram_serves_oldest_ready_transfer() {
        let mut g = Graph::new();
        let vec = g.add(Resource::Vec(0), 4, &[]);
        let mac = g.add(Resource::Mac(0), 2, &[]);
        // Holds the channel 0..10.
        g.add(Resource::Dram, 10, &[]);
        // Both wait for the channel: the older one (ready at 4) goes
        // before the younger one (ready at 2), at 10..15, then 15..22.
        g.add(Resource::Dram, 5, &[Some(vec)]);
        let younger = g.add(Resource::Dram, 7, &[Some(mac)]);
        g.add(Resource::Vec(0), 100, &[Some(younger)]);
        assert_eq!(run(&g).unwrap().makespan, 122);
    }

    #[test]
    fn sync_tasks_take_no_time() {
        let mut g = Graph::new();
        let a = g.add(Resource::Mac(1), 7, &[]);
        let join = g.add(Resource::Sync, 0, &[Some(a)]);
        g.add(Resource::Vec(0), 3, &[Some(join)]);
        assert_eq!(run(&g).unwrap().makespan, 10);
    }

    #[test]
    fn empty_graph_finishes_at_zero() {
        assert_eq!(run(&Graph::new()).unwrap().makespan, 0);
    }
}
