//! Task graphs: tile operations on units, with dependencies.

/// Identifies a task of a [`Graph`]; ids grow in the order tasks are added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TaskId(u32);

impl TaskId {
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

/// The unit a task occupies for its duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    /// The DRAM channel shared by all cores.
    Dram,
    /// The MAC array of a core.
    Mac(u32),
    /// The VEC unit of a core.
    Vec(u32),
    /// No unit: a synchronisation point that completes as soon as its
    /// dependencies have.
    Sync,
}

/// Tasks with their unit, duration and dependencies. Dependencies always
/// point at earlier tasks, so the graph is acyclic by construction.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    resources: Vec<Resource>,
    cycles: Vec<u64>,
    /// `deps[dep_start[t]..dep_start[t + 1]]` are task `t`'s dependencies.
    dep_start: Vec<usize>,
    deps: Vec<TaskId>,
    has_successor: Vec<bool>,
}

impl Graph {
    pub(crate) fn new() -> Self {
        Self {
            dep_start: vec![0],
            ..Self::default()
        }
    }

    /// Adds a task; `None` dependencies are skipped (a buffer slot that was
    /// never used before has nothing to wait for).
    pub(crate) fn add(
        &mut self,
        resource: Resource,
        cycles: u64,
        deps: &[Option<TaskId>],
    ) -> TaskId {
        let id = TaskId(u32::try_from(self.resources.len()).expect("task count bounded by plan"));
        for dep in deps.iter().flatten() {
            debug_assert!(dep.0 < id.0, "dependencies point backwards");
            self.deps.push(*dep);
            self.has_successor[dep.index()] = true;
        }
        self.dep_start.push(self.deps.len());
        self.resources.push(resource);
        self.cycles.push(cycles);
        self.has_successor.push(false);
        id
    }

    pub(crate) fn len(&self) -> usize {
        self.resources.len()
    }

    pub(crate) fn resource(&self, t: usize) -> Resource {
        self.resources[t]
    }

    pub(crate) fn cycles(&self, t: usize) -> u64 {
        self.cycles[t]
    }

    pub(crate) fn deps(&self, t: usize) -> &[TaskId] {
        &self.deps[self.dep_start[t]..self.dep_start[t + 1]]
    }

    /// Tasks from `from` on that nothing depends on yet.
    pub(crate) fn sinks_from(&self, from: usize) -> Vec<TaskId> {
        (from..self.len())
            .filter(|&t| !self.has_successor[t])
            .map(|t| TaskId(t as u32))
            .collect()
    }
}
