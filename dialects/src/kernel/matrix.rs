//! Cooperative matrices: a `rows x cols` tile held by the invocations of
//! one subgroup together, multiplied on the device's matrix units (Vulkan's
//! `VK_KHR_cooperative_matrix`, WGSL's `coop_mat16x16`). Its type says its
//! role in `a x b + c`, as the hardware needs to know how the elements are
//! spread over the subgroup:
//!
//! ```text
//! !kernel.matrix<16x16xf16, a>
//! ```

use ircc_core::{ElemType, Type};

/// The largest side a matrix type may have.
pub const MAX_SIDE: i64 = 64;

/// A matrix's operand position in `a x b + c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatrixRole {
    A,
    B,
    /// The accumulator, and every multiply-add's result.
    C,
}

impl MatrixRole {
    pub fn name(self) -> &'static str {
        match self {
            MatrixRole::A => "a",
            MatrixRole::B => "b",
            MatrixRole::C => "c",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatrixType {
    pub rows: i64,
    pub cols: i64,
    pub elem: ElemType,
    pub role: MatrixRole,
}

impl MatrixType {
    pub fn to_type(self) -> Type {
        Type::Opaque {
            dialect: "kernel".to_string(),
            name: "matrix".to_string(),
            body: Some(format!(
                "{}x{}x{}, {}",
                self.rows,
                self.cols,
                self.elem,
                self.role.name()
            )),
        }
    }

    /// The matrix type `ty` is, or why it is not one.
    pub fn of(ty: &Type) -> Result<MatrixType, String> {
        let bad = || {
            format!(
                "expected !kernel.matrix<RxCxf16|f32, a|b|c> of sides 1 to {MAX_SIDE}, found {ty}"
            )
        };
        let Type::Opaque {
            dialect,
            name,
            body: Some(body),
        } = ty
        else {
            return Err(bad());
        };
        if dialect != "kernel" || name != "matrix" {
            return Err(bad());
        }
        let (shape, role) = body.split_once(',').ok_or_else(bad)?;
        let role = match role.trim() {
            "a" => MatrixRole::A,
            "b" => MatrixRole::B,
            "c" => MatrixRole::C,
            _ => return Err(bad()),
        };
        let mut parts = shape.trim().splitn(3, 'x');
        // Matrix units multiply small tiles (8 to 16 a side today): a
        // larger side is a mistake, and would have the interpreter hold it
        // whole in every lane.
        let side = |s: Option<&str>| {
            s.and_then(|s| s.parse::<i64>().ok())
                .filter(|&v| (1..=MAX_SIDE).contains(&v))
        };
        let rows = side(parts.next()).ok_or_else(bad)?;
        let cols = side(parts.next()).ok_or_else(bad)?;
        let elem = match parts.next() {
            Some("f16") => ElemType::F16,
            Some("f32") => ElemType::F32,
            _ => return Err(bad()),
        };
        Ok(MatrixType {
            rows,
            cols,
            elem,
            role,
        })
    }

    /// Whether `ty` is a matrix type.
    pub fn is(ty: &Type) -> bool {
        matches!(ty, Type::Opaque { dialect, name, .. } if dialect == "kernel" && name == "matrix")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_types_read_back_as_printed_and_others_are_refused() {
        let t = MatrixType {
            rows: 16,
            cols: 16,
            elem: ElemType::F16,
            role: MatrixRole::B,
        };
        assert_eq!(t.to_type().to_string(), "!kernel.matrix<16x16xf16, b>");
        assert_eq!(MatrixType::of(&t.to_type()), Ok(t));
        for bad in [
            "16x16xi32, a",
            "16x16xf16, d",
            "0x16xf16, a",
            "16xf16, a",
            "65536x65536xf32, c",
        ] {
            let ty = Type::Opaque {
                dialect: "kernel".into(),
                name: "matrix".into(),
                body: Some(bad.into()),
            };
            assert!(MatrixType::of(&ty).is_err(), "{bad}");
        }
    }
}
