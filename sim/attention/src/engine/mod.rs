//! The event-level simulator: a task graph over the accelerator's units and
//! a discrete-event run of it.

mod graph;
mod sim;

pub(crate) use graph::{Graph, Resource, TaskId};
pub(crate) use sim::run;
