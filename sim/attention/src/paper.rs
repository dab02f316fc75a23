//! Figures from the paper, kept as data to compare against.

use crate::compare::Speedups;

/// One row of Table 2 ("Cycles and Speedup Comparisons Across Networks for
/// Different Methods").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PaperRow {
    /// Network name as in Table 1.
    pub network: &'static str,
    /// Cycles in millions: Layer-Wise, Soft-Pipe, FLAT, TileFlow,
    /// MAS-Attention.
    pub mega_cycles: [f64; 5],
    /// MAS-Attention's speed-up over each baseline.
    pub speedup: Speedups,
}

const fn row(network: &'static str, mega_cycles: [f64; 5], s: [f64; 4]) -> PaperRow {
    PaperRow {
        network,
        mega_cycles,
        speedup: Speedups {
            layer_wise: s[0],
            soft_pipe: s[1],
            flat: s[2],
            tileflow: s[3],
        },
    }
}

/// Table 2 of the paper, in Table 1's workload order.
pub const TABLE2: [PaperRow; 12] = [
    row(
        "BERT-Base & T5-Base",
        [3.637, 2.064, 1.573, 0.799, 0.786],
        [4.63, 2.63, 2.00, 1.02],
    ),
    row(
        "BERT-Large & T5-Large",
        [5.505, 2.753, 1.835, 1.311, 1.049],
        [5.25, 2.63, 1.75, 1.25],
    ),
    row(
        "BERT-Small",
        [2.753, 1.376, 0.918, 0.655, 0.524],
        [5.25, 2.63, 1.75, 1.25],
    ),
    row(
        "Llama3-8B & T5-3B (T5-XL)",
        [12.845, 8.389, 4.719, 5.243, 4.194],
        [3.06, 2.00, 1.13, 1.25],
    ),
    row(
        "T5-Mini & T5-Small",
        [2.228, 1.180, 0.721, 0.328, 0.262],
        [8.50, 4.50, 2.75, 1.25],
    ),
    row(
        "ViT-B/14",
        [0.612, 0.381, 0.266, 0.263, 0.151],
        [4.06, 2.53, 1.77, 1.75],
    ),
    row(
        "ViT-L/14",
        [1.242, 0.508, 0.354, 0.351, 0.201],
        [6.19, 2.53, 1.77, 1.75],
    ),
    row(
        "ViT-H/14",
        [1.355, 0.558, 0.405, 0.439, 0.251],
        [5.40, 2.23, 1.61, 1.75],
    ),
    row(
        "ViT-B/16",
        [1.081, 0.590, 0.426, 0.249, 0.197],
        [5.50, 3.00, 2.17, 1.27],
    ),
    row(
        "ViT-L/16",
        [1.311, 0.786, 0.524, 0.332, 0.262],
        [5.00, 3.00, 2.00, 1.27],
    ),
    row(
        "ViT-H/16",
        [1.376, 0.852, 0.590, 0.414, 0.328],
        [4.20, 2.60, 1.80, 1.26],
    ),
    row(
        "XLM",
        [4.194, 2.097, 1.180, 1.311, 1.049],
        [4.00, 2.00, 1.13, 1.25],
    ),
];

/// Table 2's geometric means of the speed-ups.
pub const TABLE2_GEOMEAN: Speedups = Speedups {
    layer_wise: 5.09,
    soft_pipe: 2.78,
    flat: 1.70,
    tileflow: 1.31,
};
