//! The 2.5D layouts of the texture level (SmartMem §3.3): one axis of the
//! tensor is packed four at a time into the lanes of a texel, and one axis
//! (the *contiguous* axis; it may be the lane axis itself) runs along
//! texture x, so that consecutive texels along x hold consecutive indices
//! of it. The texel grid (the shape with the lane axis divided by four,
//! rounded up) is walked with the contiguous axis innermost and the other
//! axes in their order; those rows sit side by side, as many per texture
//! line as fit in the device's extent, and the lines stack along y.
//!
//! The map from a tensor index to `(x, y, lane)` is affine, so it composes
//! with views like any address and prints as the `layout` of
//! `texture.place` and `texture.read`.

use ircc_core::{AffineExpr, AffineMap, Type};

/// Lanes in a texel.
pub const LANES: i64 = 4;

/// How texels store their lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TexelFormat {
    Rgba32f,
    Rgba16f,
}

impl TexelFormat {
    pub fn name(self) -> &'static str {
        match self {
            TexelFormat::Rgba32f => "rgba32f",
            TexelFormat::Rgba16f => "rgba16f",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [TexelFormat::Rgba32f, TexelFormat::Rgba16f]
            .into_iter()
            .find(|f| f.name() == name)
    }

    /// Bytes of one texel.
    pub fn texel_bytes(self) -> i64 {
        match self {
            TexelFormat::Rgba32f => 16,
            TexelFormat::Rgba16f => 8,
        }
    }
}

/// A texture's extent and format: `!texture.tex2d<WxH, rgba32f>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TextureType {
    pub width: i64,
    pub height: i64,
    pub format: TexelFormat,
}

impl TextureType {
    pub fn to_type(self) -> Type {
        Type::Opaque {
            dialect: "texture".to_string(),
            name: "tex2d".to_string(),
            body: Some(format!(
                "{}x{}, {}",
                self.width,
                self.height,
                self.format.name()
            )),
        }
    }

    /// The texture type `ty` is, or why it is not one.
    pub fn of(ty: &Type) -> Result<Self, String> {
        let bad = || format!("expected !texture.tex2d<WxH, rgba32f|rgba16f>, found {ty}");
        let Type::Opaque {
            dialect,
            name,
            body: Some(body),
        } = ty
        else {
            return Err(bad());
        };
        if dialect != "texture" || name != "tex2d" {
            return Err(bad());
        }
        let (extent, format) = body.split_once(',').ok_or_else(bad)?;
        let (w, h) = extent.trim().split_once('x').ok_or_else(bad)?;
        let side = |s: &str| s.trim().parse::<i64>().ok().filter(|&v| v >= 1);
        Ok(TextureType {
            width: side(w).ok_or_else(bad)?,
            height: side(h).ok_or_else(bad)?,
            format: TexelFormat::from_name(format.trim()).ok_or_else(bad)?,
        })
    }

    pub fn bytes(self) -> i64 {
        self.width * self.height * self.format.texel_bytes()
    }
}

/// A 2.5D layout of a tensor of a given shape (see the module's doc).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TextureLayout {
    shape: Vec<i64>,
    lanes: usize,
    contiguous: usize,
    /// The texel grid, in the tensor's axis order.
    grid: Vec<i64>,
    rows_per_line: i64,
    pub width: i64,
    pub height: i64,
}

impl TextureLayout {
    /// The layout with axis `lanes` in the lanes and axis `contiguous`
    /// along x, in textures of at most `max_extent` texels a side, or
    /// `None` where it does not fit (or the tensor is a scalar or empty).
    pub fn new(shape: &[i64], lanes: usize, contiguous: usize, max_extent: i64) -> Option<Self> {
        let grid = Self::grid_of(shape, lanes, contiguous)?;
        let along = grid[contiguous];
        if along > max_extent {
            return None;
        }
        let rows = Self::rows(&grid, contiguous);
        Self::with_rows_per_line(
            shape,
            lanes,
            contiguous,
            grid,
            (max_extent / along).min(rows),
        )
        .filter(|l| l.height <= max_extent)
    }

    /// The layout of the old default: the last axis in the lanes and along x.
    pub fn last_axis(shape: &[i64], max_extent: i64) -> Option<Self> {
        let last = shape.len().checked_sub(1)?;
        Self::new(shape, last, last, max_extent)
    }

    fn grid_of(shape: &[i64], lanes: usize, contiguous: usize) -> Option<Vec<i64>> {
        if lanes >= shape.len() || contiguous >= shape.len() || shape.iter().any(|&d| d < 1) {
            return None;
        }
        let mut grid = shape.to_vec();
        grid[lanes] = (grid[lanes] + LANES - 1) / LANES;
        Some(grid)
    }

    fn rows(grid: &[i64], contiguous: usize) -> i64 {
        grid.iter()
            .enumerate()
            .filter(|&(a, _)| a != contiguous)
            .map(|(_, &d)| d)
            .product()
    }

    fn with_rows_per_line(
        shape: &[i64],
        lanes: usize,
        contiguous: usize,
        grid: Vec<i64>,
        rows_per_line: i64,
    ) -> Option<Self> {
        let rows = Self::rows(&grid, contiguous);
        if rows_per_line < 1 || rows_per_line > rows {
            return None;
        }
        Some(TextureLayout {
            width: rows_per_line * grid[contiguous],
            height: (rows + rows_per_line - 1) / rows_per_line,
            shape: shape.to_vec(),
            lanes,
            contiguous,
            grid,
            rows_per_line,
        })
    }

    /// The layout of this family whose map is `map` in a texture of `ty`,
    /// if there is one: how kernel.lower reads a `texture.place`.
    pub fn recognize(shape: &[i64], map: &AffineMap, ty: TextureType) -> Option<Self> {
        let rank = shape.len();
        (0..rank)
            .flat_map(|l| (0..rank).map(move |c| (l, c)))
            .find_map(|(l, c)| {
                let grid = Self::grid_of(shape, l, c)?;
                if ty.width % grid[c] != 0 {
                    return None;
                }
                let per_line = ty.width / grid[c];
                Self::with_rows_per_line(shape, l, c, grid, per_line)
                    .filter(|x| x.height == ty.height && x.map() == *map)
            })
    }

    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The axis packed into the lanes.
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// The axis that runs along x.
    pub fn contiguous(&self) -> usize {
        self.contiguous
    }

    /// Texels per tensor axis (the lane axis divided by four, rounded up).
    pub fn texel_grid(&self) -> &[i64] {
        &self.grid
    }

    pub fn texture_type(&self, format: TexelFormat) -> TextureType {
        TextureType {
            width: self.width,
            height: self.height,
            format,
        }
    }

    /// `(x, y)` of the texel at `texel` (an index into `texel_grid()`).
    pub fn texel(&self, texel: &[AffineExpr]) -> [AffineExpr; 2] {
        let mut row = AffineExpr::constant(0);
        for (a, t) in texel.iter().enumerate() {
            if a != self.contiguous {
                row = row * AffineExpr::constant(self.grid[a]) + t.clone();
            }
        }
        let along = AffineExpr::constant(self.grid[self.contiguous]);
        let t = texel[self.contiguous].clone();
        if self.height == 1 {
            return [row * along + t, AffineExpr::constant(0)];
        }
        if self.rows_per_line == 1 {
            return [t, row];
        }
        let per_line = AffineExpr::constant(self.rows_per_line);
        [
            row.clone().modulo(per_line.clone()) * along + t,
            row.floor_div(per_line),
        ]
    }

    /// `(x, y, lane)` of the element at `index`.
    pub fn element(&self, index: &[AffineExpr]) -> [AffineExpr; 3] {
        let four = AffineExpr::constant(LANES);
        let mut texel = index.to_vec();
        let lane = if self.shape[self.lanes] == 1 {
            AffineExpr::constant(0)
        } else {
            texel[self.lanes] = index[self.lanes].clone().floor_div(four.clone());
            index[self.lanes].clone().modulo(four)
        };
        let [x, y] = self.texel(&texel);
        [x, y, lane]
    }

    /// The layout as the affine map `index -> (x, y, lane)`.
    pub fn map(&self) -> AffineMap {
        let dims: Vec<AffineExpr> = (0..self.shape.len() as u32).map(AffineExpr::dim).collect();
        AffineMap::new(self.shape.len() as u32, 0, self.element(&dims).to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(l: &TextureLayout, i: &[i64]) -> [i64; 3] {
        l.map().eval(i, &[]).unwrap().try_into().unwrap()
    }

    #[test]
    fn last_axis_layout_fills_lines_with_rows() {
        let l = TextureLayout::last_axis(&[2, 3, 10], 8192).unwrap();
        // 3 texels per row of 10, all 6 rows on one line
        assert_eq!((l.width, l.height), (18, 1));
        assert_eq!(at(&l, &[0, 0, 0]), [0, 0, 0]);
        assert_eq!(at(&l, &[0, 0, 9]), [2, 0, 1]);
        assert_eq!(at(&l, &[1, 2, 5]), [5 * 3 + 1, 0, 1]);
        let tall = TextureLayout::last_axis(&[10_000, 4096], 8192).unwrap();
        assert_eq!((tall.width, tall.height), (8192, 1250));
        assert!(TextureLayout::last_axis(&[], 8192).is_none());
        assert!(TextureLayout::last_axis(&[70_000, 8192 * 4], 8192).is_none());
    }

    #[test]
    fn channels_in_lanes_and_width_along_x() {
        // NCHW with C in the lanes and W along x: SmartMem's conv layout.
        let l = TextureLayout::new(&[1, 8, 3, 5], 1, 3, 8192).unwrap();
        assert_eq!(l.texel_grid(), &[1, 2, 3, 5]);
        assert_eq!((l.width, l.height), (30, 1));
        assert_eq!(at(&l, &[0, 0, 0, 0]), [0, 0, 0]);
        assert_eq!(at(&l, &[0, 0, 0, 4]), [4, 0, 0]);
        assert_eq!(at(&l, &[0, 5, 0, 0]), [15, 0, 1]);
        assert_eq!(at(&l, &[0, 5, 2, 1]), [(3 + 2) * 5 + 1, 0, 1]);
        // a narrow extent stacks rows along y: two rows of five texels a
        // line, so row 5 (texel 1 of channels 4..8, pixel row 2) is the
        // second of line 2
        let narrow = TextureLayout::new(&[1, 8, 3, 5], 1, 3, 10).unwrap();
        assert_eq!((narrow.width, narrow.height), (10, 3));
        assert_eq!(at(&narrow, &[0, 5, 2, 1]), [5 + 1, 5 / 2, 1]);
    }

    #[test]
    fn every_element_has_its_own_lane() {
        for (lanes, contiguous, extent) in [(0, 1, 8192), (1, 1, 7), (2, 0, 9), (0, 0, 20)] {
            let shape = [5, 3, 6];
            let l = TextureLayout::new(&shape, lanes, contiguous, extent).unwrap();
            let mut seen = std::collections::HashSet::new();
            for i in 0..5 {
                for j in 0..3 {
                    for k in 0..6 {
                        let [x, y, lane] = at(&l, &[i, j, k]);
                        assert!(x < l.width && y < l.height && (0..4).contains(&lane));
                        assert!(seen.insert((x, y, lane)), "{lanes} {contiguous} collide");
                    }
                }
            }
            let ty = l.texture_type(TexelFormat::Rgba32f);
            assert_eq!(
                TextureLayout::recognize(&shape, &l.map(), ty),
                Some(l.clone())
            );
            assert_eq!(TextureType::of(&ty.to_type()), Ok(ty));
        }
    }
}
