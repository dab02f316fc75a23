//! The crate's error type.

use std::fmt;

/// Why a tiling cannot be run by a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TilingError {
    /// A tile extent does not divide the extent it tiles (tiles are
    /// perfect factors, as in Timeloop/TileFlow mappings).
    NotADivisor {
        /// Parameter name, e.g. `rows`.
        name: &'static str,
        /// The tile extent.
        value: u32,
        /// The extent it must divide.
        of: u32,
    },
    /// The schedule needs an inner tile extent and none was given, or has
    /// none and one was given.
    InnerMismatch {
        /// Whether the schedule expects an inner extent.
        expected: bool,
    },
    /// The schedule's buffers do not fit in L1.
    ExceedsL1 {
        /// Bytes the tiling needs.
        needed: u64,
        /// L1 capacity in bytes.
        capacity: u64,
    },
    /// The tiling is so fine that its task graph would exceed the
    /// simulator's bound (keeps every simulation's work bounded).
    TooManyTasks {
        /// Tasks the tiling would create.
        tasks: u64,
        /// The bound.
        limit: u64,
    },
}

impl fmt::Display for TilingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotADivisor { name, value, of } => {
                write!(f, "tile parameter {name}={value} does not divide {of}")
            }
            Self::InnerMismatch { expected: true } => {
                write!(f, "this schedule needs an inner tile extent")
            }
            Self::InnerMismatch { expected: false } => {
                write!(f, "this schedule takes no inner tile extent")
            }
            Self::ExceedsL1 { needed, capacity } => {
                write!(
                    f,
                    "tiling needs {needed} bytes of L1 but L1 holds {capacity}"
                )
            }
            Self::TooManyTasks { tasks, limit } => {
                write!(
                    f,
                    "tiling creates {tasks} tasks, above the limit of {limit}"
                )
            }
        }
    }
}

/// Everything that can go wrong in this crate. No public function panics on
/// bad input; it returns one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// A workload parameter is zero, inconsistent or beyond the bounds.
    InvalidWorkload(String),
    /// A workload string could not be parsed.
    Parse(String),
    /// A schedule name that is not one of the five.
    UnknownSchedule(String),
    /// An accelerator parameter is zero or out of range.
    InvalidAccelerator(String),
    /// Search options out of range.
    InvalidOptions(String),
    /// A tiling the schedule cannot run.
    InvalidTiling(TilingError),
    /// The tiling search found no tiling that the schedule can run.
    NoFeasibleTiling {
        /// Schedule name.
        schedule: &'static str,
        /// Workload name.
        workload: String,
    },
    /// The grid search would visit more points than it is allowed to.
    SearchSpaceTooLarge {
        /// Points in the space.
        points: u64,
        /// The bound.
        limit: u64,
    },
    /// The task graph stopped before every task ran. This is a bug in a
    /// schedule (a dependency cycle through an in-order unit), reported
    /// rather than hung on.
    Deadlock {
        /// Tasks that completed.
        completed: usize,
        /// Tasks in the graph.
        total: usize,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidWorkload(why) => write!(f, "invalid workload: {why}"),
            Self::Parse(why) => write!(f, "cannot parse workload: {why}"),
            Self::UnknownSchedule(name) => write!(
                f,
                "unknown schedule `{name}` (expected layer-wise, soft-pipe, flat, tileflow or mas)"
            ),
            Self::InvalidAccelerator(why) => write!(f, "invalid accelerator: {why}"),
            Self::InvalidOptions(why) => write!(f, "invalid search options: {why}"),
            Self::InvalidTiling(why) => write!(f, "invalid tiling: {why}"),
            Self::NoFeasibleTiling { schedule, workload } => {
                write!(f, "no feasible tiling for {schedule} on {workload}")
            }
            Self::SearchSpaceTooLarge { points, limit } => {
                write!(f, "grid search space has {points} points, limit is {limit}")
            }
            Self::Deadlock { completed, total } => {
                write!(
                    f,
                    "task graph deadlocked after {completed} of {total} tasks"
                )
            }
        }
    }
}

impl std::error::Error for SimError {}

impl From<TilingError> for SimError {
    fn from(e: TilingError) -> Self {
        Self::InvalidTiling(e)
    }
}
