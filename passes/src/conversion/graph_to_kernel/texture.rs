//! The default 2.5D texture layout (DESIGN.md's texture level), used for
//! every eligible intermediate when `kernel.lower{textures=true}` asks for
//! it, until layout selection chooses layouts per tensor.
//!
//! The last axis goes into the four lanes of texels: a row of the other
//! axes takes `ceil(last / 4)` texels, and rows sit side by side, as many
//! per texture line as fit in `max_extent()`. The map from a logical index to
//! `(x, y, lane)` is affine, so it composes with views like any address.

use super::address::{Ix, linearize};

/// The largest texture side the target allows.
fn max_extent() -> i64 {
    ircc_dialects::kernel::Target::webgpu().max_texture_extent
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextureLayout {
    pub width: i64,
    pub height: i64,
    /// The shape of the tensor without its last axis.
    rows_shape: Vec<i64>,
    /// Texels per row: `ceil(last / 4)`.
    texels_per_row: i64,
    rows_per_line: i64,
}

impl TextureLayout {
    /// The layout of a tensor of `shape`, or `None` where it does not fit
    /// (a scalar, or more than `max_extent()` texels either way).
    pub fn of(shape: &[i64]) -> Option<Self> {
        let (&last, rows_shape) = shape.split_last()?;
        let rows: i64 = rows_shape.iter().product();
        let texels_per_row = (last + 3) / 4;
        if last < 1 || rows < 1 || texels_per_row > max_extent() {
            return None;
        }
        let rows_per_line = (max_extent() / texels_per_row).min(rows);
        let height = (rows + rows_per_line - 1) / rows_per_line;
        (height <= max_extent()).then(|| TextureLayout {
            width: rows_per_line * texels_per_row,
            height,
            rows_shape: rows_shape.to_vec(),
            texels_per_row,
            rows_per_line,
        })
    }

    /// Texels along the last axis (the texel grid is the tensor's shape with
    /// its last axis divided by four, rounded up).
    pub fn texels_per_row(&self) -> i64 {
        self.texels_per_row
    }

    /// `(x, y)` of texel `t` (along the last axis) of the row at `rows`.
    pub fn texel(&self, rows: &[Ix], t: Ix) -> [Ix; 2] {
        let row = linearize(rows, &self.rows_shape);
        let per_line = Ix::constant(self.rows_per_line);
        [
            row.clone().modulo(per_line.clone()) * Ix::constant(self.texels_per_row) + t,
            row.floor_div(per_line),
        ]
    }

    /// `(x, y, lane)` of the element at `idx`.
    pub fn element(&self, idx: &[Ix]) -> [Ix; 3] {
        let (last, rows) = idx.split_last().expect("a texture tensor has an axis");
        let [x, y] = self.texel(rows, last.clone().floor_div(Ix::constant(4)));
        [x, y, last.clone().modulo(Ix::constant(4))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_fill_lines_and_lanes_hold_the_last_axis() {
        let l = TextureLayout::of(&[2, 3, 10]).unwrap();
        // 3 texels per row of 10, all 6 rows on one line
        assert_eq!((l.width, l.height), (18, 1));
        let at = |i: &[i64]| {
            let idx: Vec<Ix> = i.iter().map(|&c| Ix::constant(c)).collect();
            l.element(&idx).map(|e| e.eval(&[], &[]).unwrap())
        };
        assert_eq!(at(&[0, 0, 0]), [0, 0, 0]);
        assert_eq!(at(&[0, 0, 9]), [2, 0, 1]);
        assert_eq!(at(&[1, 2, 5]), [5 * 3 + 1, 0, 1]);
        let tall = TextureLayout::of(&[10_000, 4096]).unwrap();
        assert_eq!((tall.width, tall.height), (8192, 1250));
        assert!(TextureLayout::of(&[]).is_none());
        assert!(TextureLayout::of(&[70_000, 8192 * 4]).is_none());
    }
}
