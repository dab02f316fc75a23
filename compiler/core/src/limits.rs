//! The limits that keep hostile input from exhausting memory, stack or
//! time, in one place. Input is checked against them before anything is
//! allocated or walked recursively, so a hostile file gets an error naming
//! where and what (or a slower, unfolded result) instead of an abort.

/// The largest extent a tensor dimension may have. Bounding extents (and
/// attribute values, see the verifier) keeps all shape arithmetic far from
/// overflow.
pub const MAX_DIM: i64 = 1 << 31;

/// The most elements a tensor type may have (2^40, a terabyte of bytes).
pub const MAX_ELEMENTS: i64 = 1 << 40;

/// The most elements a constant computed while compiling may have (ONNX
/// shape folding; 128 MiB of f64). A larger result is left to run time.
pub const MAX_FOLDED_ELEMENTS: i64 = 1 << 24;

/// The most multiply-adds one fold at import may take (a product of two
/// 4096x4096 constants is 2^36); a larger one is left to run time.
pub const MAX_FOLDED_WORK: i64 = 1 << 30;

/// The largest tensor the interpreters materialize (2 GiB of f64).
pub const MAX_INTERPRETED_ELEMENTS: i64 = 1 << 28;

/// The most invocations one `kernel.launch` may run in the interpreter.
pub const MAX_INVOCATIONS: i64 = 1 << 31;

/// The deepest nesting of brackets (`(`, `[`, `{`, `<`) in textual IR.
/// Real modules nest a few dozen levels; the limit keeps the recursive
/// descent of the parser, printer and verifier well inside a thread's stack.
/// A region costs two levels (`({` in the generic form), so regions nest
/// at most 63 deep.
pub const MAX_NESTING: usize = 128;

/// The tallest affine expression tree, counted in operators (a flat sum of
/// n terms is n - 1 tall). Every walk of an expression recurses, so this
/// bounds their stack use.
pub const MAX_AFFINE_HEIGHT: usize = 256;

/// The largest view whose indices the verifier checks one by one, where
/// interval bounds cannot show that its map stays inside the source.
pub const MAX_CHECKED_VIEW: i64 = 1 << 22;

/// How far below its root, and over how many nodes, a term of
/// `graph.math-rewrite` reaches: DNNFusion's rules rewrite a few ops at a
/// time, and the bounds keep the pass linear in the size of the function
/// and its recursion shallow.
pub const MAX_TERM_DEPTH: usize = 64;
pub const MAX_TERM_NODES: usize = 512;
