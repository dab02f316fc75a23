//! Index maps of layout operators, built from SmartMem's three index
//! dependencies: identity (`o -> o`), split (`i -> (i floordiv c, i mod c)`)
//! and merge (`(i, j) -> i * c + j`). Every map goes from a result index to
//! a source index.

use ircc_core::{AffineExpr as E, AffineMap};

/// `Σ dims[k] * stride_k` over a row-major `shape`: several axes merged into one.
fn merge(dims: &[E], shape: &[i64]) -> E {
    let mut acc = E::Const(0);
    let mut stride = 1;
    for (d, &n) in dims.iter().zip(shape).rev() {
        acc = d.clone() * E::Const(stride) + acc;
        stride *= n;
    }
    acc
}

/// One axis split into several of `shape`: `(l floordiv stride) mod extent`,
/// without the mod on the outermost and the floordiv on the innermost.
fn split(l: E, shape: &[i64]) -> Vec<E> {
    let mut out = Vec::with_capacity(shape.len());
    let mut stride: i64 = shape.iter().product();
    for (k, &n) in shape.iter().enumerate() {
        stride /= n.max(1);
        let q = if stride == 1 {
            l.clone()
        } else {
            l.clone().floor_div(E::Const(stride))
        };
        out.push(if k == 0 { q } else { q.modulo(E::Const(n)) });
    }
    out
}

/// Reshape as a map. Axes are grouped where the extents multiply out
/// equally, so `56x56 -> 8x7x8x7` becomes two independent splits instead
/// of one linearization of everything.
pub fn reshape(from: &[i64], to: &[i64]) -> Option<AffineMap> {
    if from.contains(&0) || to.contains(&0) {
        return None;
    }
    let mut results = vec![E::Const(0); from.len()];
    let src: Vec<usize> = (0..from.len()).filter(|&i| from[i] != 1).collect();
    let dst: Vec<usize> = (0..to.len()).filter(|&j| to[j] != 1).collect();
    let (mut i, mut j) = (0, 0);
    while i < src.len() && j < dst.len() {
        let (mut gi, mut gj) = (vec![src[i]], vec![dst[j]]);
        let (mut pi, mut pj) = (from[src[i]], to[dst[j]]);
        i += 1;
        j += 1;
        while pi != pj {
            if pi < pj {
                pi *= from[*src.get(i)?];
                gi.push(src[i]);
                i += 1;
            } else {
                pj *= to[*dst.get(j)?];
                gj.push(dst[j]);
                j += 1;
            }
        }
        let l = merge(
            &gj.iter().map(|&d| E::Dim(d as u32)).collect::<Vec<_>>(),
            &gj.iter().map(|&d| to[d]).collect::<Vec<_>>(),
        );
        for (k, e) in gi
            .iter()
            .zip(split(l, &gi.iter().map(|&d| from[d]).collect::<Vec<_>>()))
        {
            results[*k] = e;
        }
    }
    (i == src.len() && j == dst.len()).then(|| AffineMap::new(to.len() as u32, 0, results))
}

/// Result axis `i` is source axis `perm[i]`.
pub fn transpose(perm: &[usize]) -> AffineMap {
    let mut results = vec![E::Const(0); perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        results[p] = E::Dim(i as u32);
    }
    AffineMap::new(perm.len() as u32, 0, results)
}

/// `source[start + o * step]` on every axis.
pub fn slice(start: &[i64], step: &[i64]) -> AffineMap {
    let results = start
        .iter()
        .zip(step)
        .enumerate()
        .map(|(i, (&s, &k))| E::Dim(i as u32) * E::Const(k) + E::Const(s))
        .collect();
    AffineMap::new(start.len() as u32, 0, results)
}

/// Broadcast (`expand`): extent-1 source axes read index 0; `tile`: index
/// modulo the source extent.
pub fn repeat(from: &[i64], to: &[i64], tile: bool) -> AffineMap {
    let lead = to.len() - from.len();
    let results = from
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let d = E::Dim((lead + k) as u32);
            match (tile, n) {
                (_, 1) => E::Const(0),
                (true, _) if to[lead + k] != n => d.modulo(E::Const(n)),
                _ => d,
            }
        })
        .collect();
    AffineMap::new(to.len() as u32, 0, results)
}

/// DepthToSpace on NCHW: result (n, c, h, w) reads channel
/// `(h mod b)·b·C + (w mod b)·C + c` (DCR) or `c·b² + (h mod b)·b + w mod b`
/// (CRD) at `(h floordiv b, w floordiv b)`.
pub fn depth_to_space(block: i64, channels_out: i64, crd: bool) -> AffineMap {
    let (n, c, h, w) = (E::Dim(0), E::Dim(1), E::Dim(2), E::Dim(3));
    let b = || E::Const(block);
    let (bh, bw) = (h.clone().modulo(b()), w.clone().modulo(b()));
    let channel = if crd {
        c * E::Const(block * block) + bh * b() + bw
    } else {
        bh * E::Const(block * channels_out) + bw * E::Const(channels_out) + c
    };
    AffineMap::new(4, 0, vec![n, channel, h.floor_div(b()), w.floor_div(b())])
}

/// SpaceToDepth on NCHW: result channel `c = (bh·b + bw)·C + ci` reads
/// `(ci, h·b + bh, w·b + bw)`.
pub fn space_to_depth(block: i64, channels_in: i64) -> AffineMap {
    let (n, c, h, w) = (E::Dim(0), E::Dim(1), E::Dim(2), E::Dim(3));
    let blk = c.clone().floor_div(E::Const(channels_in));
    let ci = c.modulo(E::Const(channels_in));
    let bh = blk.clone().floor_div(E::Const(block));
    let bw = blk.modulo(E::Const(block));
    AffineMap::new(
        4,
        0,
        vec![n, ci, h * E::Const(block) + bh, w * E::Const(block) + bw],
    )
}

/// Gather along `axis` by indices that are an affine function of their own
/// position, `first + Σ strides[j] · i_j`: the index axes replace `axis`.
pub fn affine_pick(rank: usize, axis: usize, first: i64, strides: &[i64]) -> AffineMap {
    let index_rank = strides.len();
    let terms = strides
        .iter()
        .enumerate()
        .filter(|&(_, &s)| s != 0)
        .map(|(j, &s)| E::Dim((axis + j) as u32) * E::Const(s));
    let picked = match terms.reduce(|a, b| a + b) {
        Some(sum) if first == 0 => sum,
        Some(sum) => sum + E::Const(first),
        None => E::Const(first),
    };
    let results = (0..rank)
        .map(|k| match k.cmp(&axis) {
            std::cmp::Ordering::Less => E::Dim(k as u32),
            std::cmp::Ordering::Equal => picked.clone(),
            std::cmp::Ordering::Greater => E::Dim((k - 1 + index_rank) as u32),
        })
        .collect();
    AffineMap::new((rank - 1 + index_rank) as u32, 0, results)
}

/// The first value and per-axis strides of `values` (row-major over
/// `shape`) if every value is `first + Σ strides[j] · i_j`.
pub fn affine_indices(values: &[i64], shape: &[usize]) -> Option<(i64, Vec<i64>)> {
    let first = *values.first()?;
    let mut row_major = vec![1usize; shape.len()];
    for j in (0..shape.len().saturating_sub(1)).rev() {
        row_major[j] = row_major[j + 1] * shape[j + 1];
    }
    let strides: Vec<i64> = (0..shape.len())
        .map(|j| match shape[j] {
            1 => 0,
            _ => values[row_major[j]] - first,
        })
        .collect();
    let fits = values.iter().enumerate().all(|(flat, &v)| {
        let expected = (0..shape.len()).fold(first, |acc, j| {
            acc + strides[j] * ((flat / row_major[j]) % shape[j]) as i64
        });
        v == expected
    });
    fits.then_some((first, strides))
}

/// What each source axis depends on, SmartMem's classification of a map.
pub fn dependency(e: &E) -> &'static str {
    fn dims(e: &E, out: &mut Vec<u32>) {
        match e {
            E::Dim(d) => out.push(*d),
            E::Sym(_) | E::Const(_) => {}
            E::Add(a, b) | E::Mul(a, b) | E::FloorDiv(a, b) | E::CeilDiv(a, b) | E::Mod(a, b) => {
                dims(a, out);
                dims(b, out);
            }
        }
    }
    let mut ds = Vec::new();
    dims(e, &mut ds);
    ds.sort_unstable();
    ds.dedup();
    match (ds.len(), e.div_mod_count()) {
        (0, _) => "constant",
        (1, 0) if matches!(e, E::Dim(_)) => "identity",
        (1, 0) => "affine",
        (1, _) => "split",
        (_, 0) => "merge",
        _ => "merge+split",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_groups_axes() {
        let m = reshape(&[1, 56, 56, 96], &[1, 8, 7, 8, 7, 96]).unwrap();
        assert_eq!(
            m.to_string(),
            "(d0, d1, d2, d3, d4, d5) -> (0, d1 * 7 + d2, d3 * 7 + d4, d5)"
        );
        let m = reshape(&[64, 49, 96], &[1, 8, 8, 7, 7, 96]).unwrap();
        assert_eq!(
            m.to_string(),
            "(d0, d1, d2, d3, d4, d5) -> (d1 * 8 + d2, d3 * 7 + d4, d5)"
        );
        let m = reshape(&[6, 4], &[4, 6]).unwrap();
        assert_eq!(
            m.to_string(),
            "(d0, d1) -> ((d0 * 6 + d1) floordiv 4, (d0 * 6 + d1) mod 4)"
        );
        assert_eq!(dependency(&m.results[0]), "merge+split");
        assert!(reshape(&[0, 3], &[3, 0]).is_none());
    }

    #[test]
    fn maps_agree_with_their_definitions() {
        let m = depth_to_space(2, 3, false);
        // DCR: y[0, c, h, w] = x[0, (h%2)*2*3 + (w%2)*3 + c, h/2, w/2]; at (0, 1, 3, 2): 6 + 0 + 1
        assert_eq!(m.eval(&[0, 1, 3, 2], &[]).unwrap(), vec![0, 7, 1, 1]);
        let m = space_to_depth(2, 3);
        // channel 7 = block 2 (bh 1, bw 0), ci 1: row 1·2 + 1, column 1·2 + 0
        assert_eq!(m.eval(&[0, 7, 1, 1], &[]).unwrap(), vec![0, 1, 3, 2]);
    }

    #[test]
    fn gathers_by_affine_indices_become_maps() {
        // indices [[1, 3, 5], [2, 4, 6]]: 1 + 1·i0 + 2·i1
        let (first, strides) = affine_indices(&[1, 3, 5, 2, 4, 6], &[2, 3]).unwrap();
        assert_eq!((first, strides.as_slice()), (1, [1, 2].as_slice()));
        let m = affine_pick(3, 1, first, &strides);
        assert_eq!(
            m.to_string(),
            "(d0, d1, d2, d3) -> (d0, d1 + d2 * 2 + 1, d3)"
        );
        assert_eq!(m.eval(&[0, 1, 2, 4], &[]).unwrap(), vec![0, 6, 4]);
        // a scalar index drops the axis
        let m = affine_pick(2, 0, 3, &[]);
        assert_eq!(m.to_string(), "(d0) -> (3, d0)");
        assert!(affine_indices(&[0, 2, 1], &[3]).is_none());
        assert_eq!(affine_indices(&[7], &[1, 1]), Some((7, vec![0, 0])));
    }
}
